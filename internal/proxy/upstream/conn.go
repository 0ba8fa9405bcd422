// Package upstream is the proxy's connections to its shards: one place
// that builds a shard's connection with its TLS mode, sized to what the
// shard advertises. With the frame front the calls go as streams on the
// proxy's own HTTP/2 pool (Pool, and a gRPC client over it); else over
// grpc-go's ClientConns. It imports nothing of the proxy but its wire
// helpers (internal/proxy/grpcwire).
package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// The TLS modes of a shard: "" or "false" in plain text, "true" over TLS
// checked against the upstream CA, "insecure" over TLS without checking
// the shard's certificate (tests, self-signed labs).
const (
	TLSPlain    = "false"
	TLSVerified = "true"
	TLSInsecure = "insecure"
)

// ParseTLS reads a shard's TLS mode.
func ParseTLS(v string) (string, error) {
	switch v {
	case "", TLSPlain:
		return TLSPlain, nil
	case TLSVerified, TLSInsecure:
		return v, nil
	}
	return "", fmt.Errorf("tls %q: want true, insecure or false", v)
}

// TLSConfig is the TLS configuration of a mode (nil: plain text); roots
// nil checks against the system's.
func TLSConfig(mode string, roots *x509.CertPool) *tls.Config {
	switch mode {
	case TLSVerified:
		return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	case TLSInsecure:
		return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}
	}
	return nil
}

// transport is how grpc-go dials a shard.
func transport(mode string, roots *x509.CertPool) credentials.TransportCredentials {
	if c := TLSConfig(mode, roots); c != nil {
		return credentials.NewTLS(c)
	}
	return insecure.NewCredentials()
}

// Conn is one shard's connections; calls go round-robin between them.
type Conn struct {
	// Frames are the frame front's own connections (nil with grpc-go's).
	Frames *Pool
	// Advertised is the SETTINGS_MAX_CONCURRENT_STREAMS the shard sent
	// when its connections were planned (0: none, or not read).
	Advertised uint32

	conns   []*grpc.ClientConn
	clients []pb.GatewayClient
	next    atomic.Uint32
}

// Dial readies n connections to the shard id at addr in a TLS mode: the
// frame front's own (frames), else grpc-go's. It does not wait for the
// shard: calls find out.
func Dial(id, addr, mode string, roots *x509.CertPool, n int, frames bool) (*Conn, error) {
	mode, err := ParseTLS(mode)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", id, err)
	}
	c := &Conn{}
	if frames {
		c.Frames = NewPool(addr, TLSConfig(mode, roots), n)
		c.clients = []pb.GatewayClient{pb.NewGatewayClient(&grpcConn{u: c.Frames, id: id, authority: addr})}
		return c, nil
	}
	for range max(n, 1) {
		conn, err := grpc.NewClient(addr,
			grpc.WithTransportCredentials(transport(mode, roots)),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
			// The proxy decides itself what may be retried (never an
			// ambiguous call); grpc-go's own retries would also buffer
			// every request.
			grpc.WithDisableRetry(),
			// A shard that comes back is reconnected within seconds
			// (grpc-go's jittered backoff grows to two minutes by
			// default), and a dead connection is found by pings even when
			// no call is in flight.
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
				MinConnectTimeout: 5 * time.Second}),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("shard %s (%s): %w", id, addr, err)
		}
		c.conns = append(c.conns, conn)
		c.clients = append(c.clients, pb.NewGatewayClient(conn))
	}
	return c, nil
}

// Client is the next connection's Gateway client, round-robin; nil for
// a Conn that was never dialed (a placement test's).
func (c *Conn) Client() pb.GatewayClient {
	switch len(c.clients) {
	case 0:
		return nil
	case 1:
		return c.clients[0]
	}
	return c.clients[c.next.Add(1)%uint32(len(c.clients))]
}

// Connections is how many connections the shard's calls share.
func (c *Conn) Connections() int {
	if c.Frames != nil {
		return c.Frames.size
	}
	return len(c.conns)
}

// Close ends every connection.
func (c *Conn) Close() {
	for _, cc := range c.conns {
		cc.Close()
	}
	if c.Frames != nil {
		c.Frames.Close()
	}
}

// Connections per shard. One HTTP/2 connection carries as many calls as
// the shard's SETTINGS_MAX_CONCURRENT_STREAMS allows; past it grpc-go
// queues new calls behind the open ones, and long polls and job streams
// hold theirs for seconds. So the proxy opens enough connections for its
// own limit of calls in flight to a shard (MaxInflightPerShard) at the
// concurrency the shard advertises, round-robin between them; a shard
// that advertises no limit gets one.
const (
	// MaxConnsPerShard is the most connections a shard gets.
	MaxConnsPerShard = 16
	// StreamsWhenUnlimited is what the proxy plans for when it sets no
	// limit of calls in flight itself.
	StreamsWhenUnlimited = 1000
)

// ConnsFor is how many connections carry want calls at advertised
// streams each (0: no limit).
func ConnsFor(want int64, advertised uint32) int {
	if advertised == 0 || want <= 0 {
		return 1
	}
	n := (want + int64(advertised) - 1) / int64(advertised)
	return int(min(max(n, 1), MaxConnsPerShard))
}

// AdvertisedStreams reads the SETTINGS_MAX_CONCURRENT_STREAMS a shard
// sends when an HTTP/2 connection opens (0: it sets none). tlsConfig is
// nil for a shard in plain text.
func AdvertisedStreams(ctx context.Context, addr string, tlsConfig *tls.Config) (uint32, error) {
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

// Plan decides how many connections to open to a shard at addr in a TLS
// mode: enough for want calls in flight (0 or less: StreamsWhenUnlimited)
// at the concurrency the shard advertises, which it returns too; one when
// that cannot be read (the calls then find out).
func Plan(ctx context.Context, addr, mode string, roots *x509.CertPool, want int64) (int, uint32) {
	mode, _ = ParseTLS(mode)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	adv, err := AdvertisedStreams(ctx, addr, TLSConfig(mode, roots))
	if err != nil {
		return 1, 0
	}
	if want <= 0 {
		want = StreamsWhenUnlimited
	}
	return ConnsFor(want, adv), adv
}
