// Package upstream is the proxy's connections to its shards, built from
// a shardconn.Target (its TLS mode and the proxy's credential for it, as
// the tools build theirs) and sized to what the shard advertises. With the frame front the calls go as streams on the
// proxy's own HTTP/2 pool (Pool, and a gRPC client over it); else over
// grpc-go's ClientConns. It imports nothing of the proxy but its wire
// helpers (internal/proxy/grpcwire).
package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"

	"github.com/shardctl/shardctl/internal/credential"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/shardconn"
)

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
	cred    *credential.Source
}

// Own is ctx carrying the proxy's own credential for this shard, for a
// call the proxy makes itself (a health check, a replay, a hand-back).
func (c *Conn) Own(ctx context.Context) (context.Context, error) {
	return shardconn.Own(ctx, c.cred)
}

// Credential is what the proxy's own calls to the shard carry (nil:
// nothing).
func (c *Conn) Credential() *credential.Source { return c.cred }

// Dial readies n connections to the shard id at t: the frame front's
// own (frames), else grpc-go's. It does not wait for the shard: calls
// find out. The connections carry no credential of their own: a
// client's call carries the client's, and the proxy's own calls add
// t.Credential to theirs (Own).
func Dial(id string, t shardconn.Target, n int, frames bool) (*Conn, error) {
	tc, err := t.TLSConfig()
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", id, err)
	}
	c := &Conn{cred: t.Credential}
	if frames {
		c.Frames = NewPool(t.Addr, tc, n)
		c.clients = []pb.GatewayClient{pb.NewGatewayClient(&grpcConn{u: c.Frames, id: id, authority: t.Addr})}
		return c, nil
	}
	transport := shardconn.Transport(tc)
	for range max(n, 1) {
		conn, err := grpc.NewClient(t.Addr,
			grpc.WithTransportCredentials(transport),
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
			return nil, fmt.Errorf("shard %s (%s): %w", id, t.Addr, err)
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

// Plan decides how many connections to open to a shard at t: enough for want calls in flight (0 or less: StreamsWhenUnlimited)
// at the concurrency the shard advertises, which it returns too; one when
// that cannot be read (the calls then find out).
func Plan(ctx context.Context, t shardconn.Target, want int64) (int, uint32) {
	tc, err := t.TLSConfig()
	if err != nil {
		return 1, 0
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	adv, err := AdvertisedStreams(ctx, t.Addr, tc)
	if err != nil {
		return 1, 0
	}
	if want <= 0 {
		want = StreamsWhenUnlimited
	}
	return ConnsFor(want, adv), adv
}
