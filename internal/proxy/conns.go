package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"

	"golang.org/x/net/http2"
)

// Connections per shard. One HTTP/2 connection carries as many calls as
// the shard's SETTINGS_MAX_CONCURRENT_STREAMS allows; past it grpc-go
// queues new calls behind the open ones, and long polls and job streams
// hold theirs for seconds. So the proxy opens enough connections for its
// own limit of calls in flight to a shard (MaxInflightPerShard) at the
// concurrency the shard advertises, round-robin between them; a shard
// that advertises no limit gets one.
const (
	maxConnsPerShard = 16
	// streamsWhenUnlimited is what the proxy plans for when it sets no
	// limit of calls in flight itself.
	streamsWhenUnlimited = 1000
)

// connsFor is how many connections carry want calls at advertised
// streams each (0: no limit).
func connsFor(want int64, advertised uint32) int {
	if advertised == 0 || want <= 0 {
		return 1
	}
	n := (want + int64(advertised) - 1) / int64(advertised)
	return int(min(max(n, 1), maxConnsPerShard))
}

// advertisedStreams reads the SETTINGS_MAX_CONCURRENT_STREAMS a shard
// sends when an HTTP/2 connection opens (0: it sets none). tlsConfig is
// nil for a shard in plain text.
func advertisedStreams(ctx context.Context, addr string, tlsConfig *tls.Config) (uint32, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if tlsConfig != nil {
		cfg := tlsConfig.Clone()
		cfg.NextProtos = []string{http2.NextProtoTLS}
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return 0, err
		}
		conn = tc
	}
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		return 0, err
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		return 0, err
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, err
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		v, ok := sf.Value(http2.SettingMaxConcurrentStreams)
		if !ok {
			return 0, nil
		}
		if v == 0 {
			return 0, errors.New("the shard advertises 0 concurrent streams: it takes no calls")
		}
		return v, nil
	}
}

// planConns decides how many connections to open to a shard: n when
// the operator set it, else from what the shard advertises (one when it
// cannot be read: the calls then find out).
func (p *Proxy) planConns(ctx context.Context, sc ShardConfig) (int, uint32) {
	if p.cfg.ConnsPerShard > 0 {
		return p.cfg.ConnsPerShard, 0
	}
	mode, _ := parseShardTLS(sc.TLS)
	var tc *tls.Config
	if mode != tlsPlain {
		tc = shardTLS(mode, p.upstreamRoots)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	adv, err := advertisedStreams(ctx, sc.Addr, tc)
	if err != nil {
		return 1, 0
	}
	want := p.cfg.MaxInflightPerShard
	if want <= 0 {
		want = streamsWhenUnlimited
	}
	return connsFor(want, adv), adv
}
