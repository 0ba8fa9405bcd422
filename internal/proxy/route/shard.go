package route

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/upstream"
	"github.com/shardctl/shardctl/internal/shardconn"
)

// Shard is one Zeebe cluster behind the proxy.
type Shard struct {
	proxyapi.ShardConfig
	Conn *upstream.Conn

	state    atomic.Value // proxyapi.State
	pool     atomic.Value // string; the registry may move a shard
	inflight atomic.Int64
	// replaying: a replay of the ledger to it runs (replays.go).
	replaying atomic.Bool
	// placing counts the requests in flight that place something new
	// (instances, start messages): what power-of-two-choices compares. All
	// requests in flight would include bursts of job completions, which
	// follow where jobs were activated, not how busy a shard is.
	Placing      atomic.Int64
	coolingUntil atomic.Int64 // unix nanos
	latency      latency      // of placements, for power-of-two-choices
	overloaded   atomic.Bool  // over the overload limit plus its excess, not yet back below the limit
	// partitions is the shard's partition count: 0 until a topology
	// call answered (one that refused the proxy's credential did not).
	partitions atomic.Int32
	health     health
	admission  admission

	mu      sync.Mutex
	lastErr string
	lastAt  time.Time

	// Metric series of this shard, resolved once: label lookups on every
	// call cost more than the count.
	inflightGauge prometheus.Gauge
	Choices       prometheus.Counter
	upstream      sync.Map // rpc+code -> prometheus.Counter
}

// newShard is a shard on its connections, in the state its configuration
// names (UP when none).
func newShard(cfg proxyapi.ShardConfig, conn *upstream.Conn) *Shard {
	s := &Shard{ShardConfig: cfg, Conn: conn}
	st := cfg.State
	if st == "" {
		st = proxyapi.Up
	}
	s.state.Store(st)
	s.pool.Store(cfg.Pool)
	return s
}

// Serves reports whether s serves the physical tenant a client sent ("":
// none, "default").
func (s *Shard) Serves(tenant string) bool { return physicaltenant.Serves(s.PhysicalTenants, tenant) }

// State is the state s is assigned; Pool the pool it is in.
func (s *Shard) State() proxyapi.State { return s.state.Load().(proxyapi.State) }
func (s *Shard) Pool() string          { return s.pool.Load().(string) }

// swapState and swapPool set the state and the pool and say what they
// were, so a change is logged once however many set it at once.
func (s *Shard) swapState(st proxyapi.State) proxyapi.State { return s.state.Swap(st).(proxyapi.State) }
func (s *Shard) swapPool(p string) string                   { return s.pool.Swap(p).(string) }

// checkTopology reads the shard's partition count and refuses a shard
// whose keys would reach into the slot bits. A shard that refuses the
// proxy's credential is not refused for it (refused says why): it joins,
// shown so, its partitions read once it lets the proxy in.
func (s *Shard) checkTopology(ctx context.Context) (refused, err error) {
	refused, err = s.topology(ctx)
	if err != nil {
		return nil, fmt.Errorf("shard %s (%s): read its topology: %w", s.ID, s.Addr, err)
	}
	return refused, s.checkPartitions()
}

// topology asks the shard for its topology with the proxy's credential
// and keeps its partition count: err is why it did not answer, refused
// why it refused what the proxy sent (it answered). A credential with no
// token to give asks without one, so a live shard still tells itself
// from a dead one.
func (s *Shard) topology(ctx context.Context) (refused, err error) {
	ctx, noToken := s.Conn.Own(ctx)
	topo, err := s.Conn.Client().Topology(ctx, &pb.TopologyRequest{})
	switch {
	case shardconn.Refused(err):
		if noToken != nil {
			return fmt.Errorf("%s (no token to send: %s)", shardconn.Refusal(err), status.Convert(noToken).Message()), nil
		}
		if s.Conn.Credential() == nil {
			return fmt.Errorf("%s (the proxy has no credential for it)", shardconn.Refusal(err)), nil
		}
		return fmt.Errorf("%s (credential %s)", shardconn.Refusal(err), s.Conn.Credential().Name()), nil
	case err != nil:
		return nil, err
	}
	s.partitions.Store(topo.GetPartitionsCount())
	if noToken != nil {
		// It answered without one, but the proxy's credential is broken.
		return errors.New(status.Convert(noToken).Message()), nil
	}
	return nil, nil
}

// checkPartitions refuses a partition count that reaches into the slot
// bits of a key.
func (s *Shard) checkPartitions() error {
	if n := s.partitions.Load(); n > keyslot.MaxPartitions {
		return fmt.Errorf("shard %s (%s) has %d partitions: at most %d fit beside the shard slot in a key; split it or use fewer partitions",
			s.ID, s.Addr, n, keyslot.MaxPartitions)
	}
	return nil
}

// CoolOff keeps s from new instances for d, and says until when.
func (s *Shard) CoolOff(d time.Duration) time.Time {
	until := time.Now().Add(d)
	s.coolingUntil.Store(until.UnixNano())
	return until
}

func (s *Shard) cooling(now time.Time) bool { return now.UnixNano() < s.coolingUntil.Load() }

// NoteError keeps err as the last error s answered, for GET /shards.
func (s *Shard) NoteError(err error) {
	s.mu.Lock()
	s.lastErr, s.lastAt = err.Error(), time.Now()
	s.mu.Unlock()
}

// takesInstances: UP and healthy, not ejected, replayed every
// deployment, not overloaded, admitted by its backlog and under its
// instance limit, under the in-flight limit, not cooling off.
func (s *Shard) takesInstances(now time.Time, maxInflight int64) bool {
	return s.State() == proxyapi.Up && !s.health.down.Load() && !s.health.needsReplay.Load() && !s.health.ejected(now) &&
		!s.overloaded.Load() && s.admission.admits(now) && (maxInflight <= 0 || s.inflight.Load() < maxInflight) && !s.cooling(now)
}

// ServesJobs: shards that may hold work and can be reached.
func (s *Shard) ServesJobs() bool {
	st := s.State()
	return (st == proxyapi.Up || st == proxyapi.Draining) && !s.health.down.Load()
}

// RoutingState is the state the proxy routes by: the assigned one, or
// DOWN while health checks fail.
func (s *Shard) RoutingState() proxyapi.State {
	if s.health.down.Load() {
		return proxyapi.Down
	}
	return s.State()
}

// NeverSent reports an error that proves the call did not reach the
// shard (the connection could not be made), so it is safe to try another.
func NeverSent(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	msg := st.Message()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "Error while dialing") ||
		strings.Contains(msg, "no such host") || strings.Contains(msg, "connection error")
}

// ObserveLatency records how long a placement on s took.
func (s *Shard) ObserveLatency(d time.Duration, now time.Time) { s.latency.observe(d, now) }

// NotePlaced counts n instances placed on s since the last reading of
// its backlog, so its instance limit counts them as in flight and its
// pace as taken.
func (s *Shard) NotePlaced(n int64) {
	s.admission.instances.placed.Add(n)
	s.admission.pacer.note(time.Now(), n)
}

// Down reports whether the health checks hold s DOWN.
func (s *Shard) Down() bool { return s.health.down.Load() }

// NeedsReplay reports whether s misses a deployment: it takes no new
// instances and no client deployment until the ledger is replayed to it.
func (s *Shard) NeedsReplay() bool { return s.health.needsReplay.Load() }
