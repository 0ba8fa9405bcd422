package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/camunda/zeebe/clients/go/v8/pkg/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
)

// ShardConfig names one shard.
type ShardConfig struct {
	ID    string         `json:"id"`
	Addr  string         `json:"address"`
	Slot  int            `json:"slot"`
	State proxyapi.State `json:"state,omitempty"`
	// Pool is the group the shard belongs to (blue, green): pool weights
	// place new instances between pools.
	Pool string `json:"pool,omitempty"`
	// Metrics is the URL of the shard's /metrics, where the proxy reads
	// its backlog for admission ("" : no admission by backlog).
	Metrics string `json:"metrics,omitempty"`
	// TLS is how the proxy connects: "" or "false" in plain text, "true"
	// over TLS checked against the upstream CA, "insecure" over TLS
	// without checking the shard's certificate (tests, self-signed labs).
	TLS string `json:"tls,omitempty"`
}

// The values of ShardConfig.TLS.
const (
	tlsPlain    = "false"
	tlsVerified = "true"
	tlsInsecure = "insecure"
)

func parseShardTLS(v string) (string, error) {
	switch v {
	case "", tlsPlain:
		return tlsPlain, nil
	case tlsVerified, tlsInsecure:
		return v, nil
	}
	return "", fmt.Errorf("tls %q: want true, insecure or false", v)
}

// shardTLS is the TLS configuration of a shard's mode (nil: plain text).
func shardTLS(mode string, roots *x509.CertPool) *tls.Config {
	switch mode {
	case tlsVerified:
		return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	case tlsInsecure:
		return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}
	}
	return nil
}

// transport is how a shard is dialed.
func transport(mode string, roots *x509.CertPool) credentials.TransportCredentials {
	if c := shardTLS(mode, roots); c != nil {
		return credentials.NewTLS(c)
	}
	return insecure.NewCredentials()
}

// shard is one Zeebe cluster behind the proxy.
type shard struct {
	ShardConfig
	conns    []*grpc.ClientConn
	clients  []pb.GatewayClient
	nextConn atomic.Uint32
	// frames are the frame front's connections (FrontFrames).
	frames *upstreams
	// advertised is the SETTINGS_MAX_CONCURRENT_STREAMS the shard sent
	// when the proxy planned its connections (0: none, or not read).
	advertised uint32

	state    atomic.Value // proxyapi.State
	pool     atomic.Value // string; the registry may move a shard
	inflight atomic.Int64
	// placing counts the requests in flight that place something new
	// (instances, start messages): what power-of-two-choices compares. All
	// requests in flight would include bursts of job completions, which
	// follow where jobs were activated, not how busy a shard is.
	placing      atomic.Int64
	coolingUntil atomic.Int64 // unix nanos
	latency      latency      // of placements, for power-of-two-choices
	overloaded   atomic.Bool  // over the overload limit plus its excess, not yet back below the limit
	partitions   int32
	health       health
	admission    admission

	mu      sync.Mutex
	lastErr string
	lastAt  time.Time

	// Metric series of this shard, resolved once: label lookups on every
	// call cost more than the count.
	inflightGauge prometheus.Gauge
	choices       prometheus.Counter
	upstream      sync.Map // rpc+code -> prometheus.Counter
}

// dialShard readies n connections to a shard (calls go round-robin
// between them): the frame front's own (frames), else grpc-go's.
func dialShard(cfg ShardConfig, roots *x509.CertPool, n int, frames bool) (*shard, error) {
	mode, err := parseShardTLS(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", cfg.ID, err)
	}
	s := &shard{ShardConfig: cfg}
	if frames {
		s.frames = newUpstreams(cfg.Addr, shardTLS(mode, roots), n)
		s.clients = []pb.GatewayClient{pb.NewGatewayClient(&shardConn{u: s.frames, id: cfg.ID, authority: cfg.Addr})}
	} else if err := s.dialGRPC(mode, roots, n); err != nil {
		return nil, err
	}
	st := cfg.State
	if st == "" {
		st = proxyapi.Up
	}
	s.state.Store(st)
	s.pool.Store(cfg.Pool)
	return s, nil
}

// dialGRPC readies n grpc-go connections to the shard.
func (s *shard) dialGRPC(mode string, roots *x509.CertPool, n int) error {
	cfg := s.ShardConfig
	for range max(n, 1) {
		conn, err := grpc.NewClient(cfg.Addr,
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
			s.closeConns()
			return fmt.Errorf("shard %s (%s): %w", cfg.ID, cfg.Addr, err)
		}
		s.conns = append(s.conns, conn)
		s.clients = append(s.clients, pb.NewGatewayClient(conn))
	}
	return nil
}

// client is the next connection's Gateway client, round-robin.
func (s *shard) client() pb.GatewayClient {
	if len(s.clients) == 1 {
		return s.clients[0]
	}
	return s.clients[s.nextConn.Add(1)%uint32(len(s.clients))]
}

// connections is how many connections the shard's calls share.
func (s *shard) connections() int {
	if s.frames != nil {
		return s.frames.size
	}
	return len(s.conns)
}

func (s *shard) closeConns() {
	for _, c := range s.conns {
		c.Close()
	}
	if s.frames != nil {
		s.frames.close()
	}
}

func (s *shard) State() proxyapi.State { return s.state.Load().(proxyapi.State) }
func (s *shard) Pool() string          { return s.pool.Load().(string) }

// swapState and swapPool set the state and the pool and say what they
// were, so a change is logged once however many set it at once.
func (s *shard) swapState(st proxyapi.State) proxyapi.State { return s.state.Swap(st).(proxyapi.State) }
func (s *shard) swapPool(p string) string                   { return s.pool.Swap(p).(string) }

// checkTopology reads the shard's partition count and refuses a shard
// whose keys would reach into the slot bits.
func (s *shard) checkTopology(ctx context.Context) error {
	topo, err := s.client().Topology(ctx, &pb.TopologyRequest{})
	if err != nil {
		return fmt.Errorf("shard %s (%s): read its topology: %w", s.ID, s.Addr, err)
	}
	if topo.GetPartitionsCount() > keyslot.MaxPartitions {
		return fmt.Errorf("shard %s (%s) has %d partitions: at most %d fit beside the shard slot in a key; split it or use fewer partitions",
			s.ID, s.Addr, topo.GetPartitionsCount(), keyslot.MaxPartitions)
	}
	s.partitions = topo.GetPartitionsCount()
	return nil
}

func (s *shard) coolOff(d time.Duration) time.Time {
	until := time.Now().Add(d)
	s.coolingUntil.Store(until.UnixNano())
	return until
}

func (s *shard) cooling(now time.Time) bool { return now.UnixNano() < s.coolingUntil.Load() }

func (s *shard) noteError(err error) {
	s.mu.Lock()
	s.lastErr, s.lastAt = err.Error(), time.Now()
	s.mu.Unlock()
}

// takesInstances: UP and healthy, not ejected, replayed every
// deployment, not overloaded, admitted by its backlog and under its
// instance limit, under the in-flight limit, not cooling off.
func (s *shard) takesInstances(now time.Time, maxInflight int64) bool {
	return s.State() == proxyapi.Up && !s.health.down.Load() && !s.health.needsReplay.Load() && !s.health.ejected(now) &&
		!s.overloaded.Load() && !s.admission.refusing.Load() && s.admission.instances.admits() && (maxInflight <= 0 || s.inflight.Load() < maxInflight) && !s.cooling(now)
}

// servesJobs: shards that may hold work and can be reached.
func (s *shard) servesJobs() bool {
	st := s.State()
	return (st == proxyapi.Up || st == proxyapi.Draining) && !s.health.down.Load()
}

// routingState is the state the proxy routes by: the assigned one, or
// DOWN while health checks fail.
func (s *shard) routingState() proxyapi.State {
	if s.health.down.Load() {
		return proxyapi.Down
	}
	return s.State()
}

// neverSent reports an error that proves the call did not reach the
// shard (the connection could not be made), so it is safe to try another.
func neverSent(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	msg := st.Message()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "Error while dialing") ||
		strings.Contains(msg, "no such host") || strings.Contains(msg, "connection error")
}
