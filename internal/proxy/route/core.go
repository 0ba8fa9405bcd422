package route

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/credential"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/logs"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/upstream"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/shardconn"
)

// Config of a proxy. Zero values take the defaults below.
type Config struct {
	Listen string // gateway address for clients
	// RESTListen serves the REST API (/v2) for clients too, over the same
	// routing core ("": none).
	RESTListen string
	// SearchTimeout bounds a REST search or get across the shards (0:
	// the queries package's default); SearchPartial answers a search from
	// the shards that answered when some did not, marked, rather than
	// failing it with 503.
	SearchTimeout time.Duration
	SearchPartial bool
	AdminListen   string // /metrics, /healthz, /readyz, /shards
	Shards        []proxyapi.ShardConfig
	// LegacyShard is the shard keys without a slot (issued before the
	// cutover) belong to; "" answers NOT_FOUND for them.
	LegacyShard string
	// MaxInflightPerShard is the most requests in flight to one shard: a
	// call past it gets RESOURCE_EXHAUSTED at once, without queueing, and
	// a shard at it gets no new instances (0: no limit; health checks and
	// Topology are never limited).
	MaxInflightPerShard int64
	// OverloadLimit and OverloadExcess (percent): a shard with more than
	// limit × (1 + excess) requests in flight gets no new instances until
	// it is back below the limit, so that it does not flap at one number
	// (defaults 200 and 50; a negative limit turns it off).
	OverloadLimit  int64
	OverloadExcess int
	// MaxBacklog records not processed past which a shard with a metrics
	// URL gets no new instances, read every BacklogInterval (defaults
	// 1000 and 1 s; negative: no admission by backlog).
	MaxBacklog      int64
	BacklogInterval time.Duration
	// InstanceLimit is how a shard with a metrics URL is kept from its
	// knee: InstanceLimitAuto (0) paces its new instances by its queue
	// (pacing.go), InstanceLimitOff (-1) neither paces nor limits, a
	// positive number is the most root instances in flight a congested
	// shard is given (instances.go), instead of pacing.
	InstanceLimit int64
	// QueueTarget is the queue delay past which a shard is paced
	// (default DefaultQueueTarget).
	QueueTarget time.Duration
	// DeployTimeout is how long a client's deployment may take on each
	// shard: one that does not take it by then catches up from the ledger
	// (default DefaultDeployTimeout).
	DeployTimeout time.Duration
	// CoolingOff is how long a shard that answered RESOURCE_EXHAUSTED gets
	// no new instances.
	CoolingOff time.Duration
	// Ledger keeps deployments; nil keeps them in memory.
	Ledger ledger.Ledger
	// Profiling serves Go's /debug/pprof on the admin address.
	Profiling bool
	// AdminTLS, when set, serves the admin address over https (its files
	// read again when they change). AdminTokenFile, when set, holds the
	// bearer token GET /shards and /debug/pprof want (read again when it
	// changes); /metrics, /healthz and /readyz stay open to scrapers and
	// probes.
	AdminTLS       *certs.Server
	AdminTokenFile string
	// ShutdownDelay is how long Close keeps serving after /readyz turns
	// 503, for endpoints and load balancers to notice; DrainBatch is how
	// many long polls and job streams it then ends a second (0: all at
	// once).
	ShutdownDelay time.Duration
	DrainBatch    int
	// ConnsPerShard is how many HTTP/2 connections go to each shard (0:
	// enough for MaxInflightPerShard calls at the concurrency the shard
	// advertises, at most 16).
	ConnsPerShard int
	// StreamStallTimeout is how long a job stream's worker may read
	// nothing while a job waits for it before the stream is ended and its
	// jobs handed back (default 10 s).
	StreamStallTimeout time.Duration
	// OnDrain hears each batch a stopping proxy ends: how many, and how
	// many are left.
	OnDrain func(ended, left int)
	// Health: active checks and outlier ejection.
	Health HealthConfig
	// Dynamic: the shards come later, through Want (from a registry);
	// the proxy may start with none.
	Dynamic bool
	// OnSync is told how each application of a wanted shard set went.
	OnSync func(error)
	// Registry, when set, is followed from Start to Close: the shards of
	// App (default registry.DefaultShardsApp), their states, the ledger
	// and the cutover weights; what goes wrong is logged (the watch
	// reconnects by itself). A registry makes the proxy Dynamic.
	Registry *registryclient.Client
	App      string
	// ID names the proxy where it registers itself (registry.ProxiesApp),
	// with its admin address, while it follows a registry (default
	// HOSTNAME-PORT).
	ID string
	// TLS, when set, serves clients over TLS (its files are read again
	// when they change; with a client CA, clients must show a certificate
	// it signed). UpstreamCA is the CA file shards with TLS "true" are
	// checked against ("": the system's roots).
	TLS        *certs.Server
	UpstreamCA string
	// Credentials are what the proxy's own calls to shards carry (health
	// checks, ledger replays, jobs handed back), by name: a shard names
	// its own (ShardConfig.Credential), else it gets DefaultCredential's
	// when there is one. Clients' calls carry the client's own
	// Authorization, never these: a client the shard would refuse is not
	// let in on the proxy's.
	Credentials map[string]credential.Config
	// Front is how clients are served: FrontFrames or FrontGRPC (""
	// takes DefaultFront).
	Front string
	// Clients are the limits the front holds client connections to.
	Clients ClientLimits
	// Logger gets one line per state change: shards added and removed,
	// DOWN and back, ejected and returned, ledger replays, states, pools
	// and pool weights from the registry, admission refusing and
	// admitting, the registry watch (nil: none).
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultMaxInflightPerShard = 1000
	DefaultCoolingOff          = 30 * time.Second
	DefaultStreamStallTimeout  = 10 * time.Second
	DefaultOverloadLimit       = 200
	DefaultOverloadExcess      = 50

	// DefaultFront serves clients when Config.Front is "".
	DefaultFront = FrontFrames
)

func (c *Config) validate() error {
	if c.Registry != nil {
		c.Dynamic = true
		if c.App == "" {
			c.App = registryapi.DefaultShardsApp
		}
	}
	if len(c.Shards) == 0 && !c.Dynamic {
		return errors.New("no shards: name at least one with --shard ID=HOST:PORT or a config file")
	}
	ids, slots := map[string]bool{}, map[int]string{}
	for _, s := range c.Shards {
		if err := validateShard(s); err != nil {
			return err
		}
		if ids[s.ID] {
			return fmt.Errorf("shard id %q is named twice", s.ID)
		}
		if other, dup := slots[s.Slot]; dup {
			return fmt.Errorf("shards %q and %q both have slot %d: every shard needs its own slot (1-%d)", other, s.ID, s.Slot, keyslot.MaxSlot)
		}
		ids[s.ID], slots[s.Slot] = true, s.ID
		if _, ok := c.Credentials[s.Credential]; s.Credential != "" && !ok {
			return fmt.Errorf("shard %q names credential %q, which the configuration does not define", s.ID, s.Credential)
		}
	}
	for name := range c.Credentials { // each is read by New's shardconn.NewAccess
		if err := registryapi.CheckCredentialName(name); err != nil {
			return err
		}
	}
	if c.LegacyShard != "" && !ids[c.LegacyShard] && !c.Dynamic {
		return fmt.Errorf("legacy shard %q is not one of the shards", c.LegacyShard)
	}
	switch c.Front {
	case "":
		c.Front = DefaultFront
	case FrontFrames, FrontGRPC:
	default:
		return fmt.Errorf("front %q: want %s or %s", c.Front, FrontFrames, FrontGRPC)
	}
	if c.CoolingOff == 0 {
		c.CoolingOff = DefaultCoolingOff
	}
	if c.StreamStallTimeout == 0 {
		c.StreamStallTimeout = DefaultStreamStallTimeout
	}
	if c.ConnsPerShard < 0 || c.ConnsPerShard > upstream.MaxConnsPerShard {
		return fmt.Errorf("connections per shard %d: want 1-%d, or 0 to size them from what the shard advertises", c.ConnsPerShard, upstream.MaxConnsPerShard)
	}
	if c.StreamStallTimeout < 0 {
		return errors.New("the stream stall timeout must be positive")
	}
	if c.CoolingOff < 0 || c.MaxInflightPerShard < 0 {
		return errors.New("cooling-off and max in-flight per shard must not be negative")
	}
	if c.OverloadLimit == 0 {
		c.OverloadLimit = DefaultOverloadLimit
	}
	if c.OverloadExcess == 0 {
		c.OverloadExcess = DefaultOverloadExcess
	}
	if c.MaxBacklog == 0 {
		c.MaxBacklog = DefaultMaxBacklog
	}
	if c.BacklogInterval == 0 {
		c.BacklogInterval = DefaultBacklogInterval
	}
	if c.InstanceLimit < InstanceLimitOff {
		return fmt.Errorf("instance limit %d: want a positive number, 0 (pace by the queue) or -1 (off)", c.InstanceLimit)
	}
	if c.QueueTarget == 0 {
		c.QueueTarget = DefaultQueueTarget
	}
	if c.DeployTimeout == 0 {
		c.DeployTimeout = DefaultDeployTimeout
	}
	if c.DeployTimeout < 0 {
		return fmt.Errorf("deploy timeout %v: want a positive duration", c.DeployTimeout)
	}
	if err := c.Clients.validate(); err != nil {
		return err
	}
	if c.QueueTarget < 0 {
		return fmt.Errorf("queue target %v: want a positive duration", c.QueueTarget)
	}
	if c.BacklogInterval < 0 {
		return fmt.Errorf("backlog interval %v: want a positive duration", c.BacklogInterval)
	}
	if c.OverloadExcess < 0 {
		return fmt.Errorf("overload excess %d%%: want a positive percent", c.OverloadExcess)
	}
	if c.Ledger == nil {
		c.Ledger = &ledger.MemoryLedger{}
	}
	return c.Health.validate()
}

func validateShard(s proxyapi.ShardConfig) error {
	if s.ID == "" {
		return errors.New("a shard has no id")
	}
	if _, _, err := net.SplitHostPort(s.Addr); err != nil {
		return fmt.Errorf("shard %q: address %q: want HOST:PORT", s.ID, s.Addr)
	}
	if s.Slot < 1 || s.Slot > keyslot.MaxSlot {
		return fmt.Errorf("shard %q: slot %d: want 1-%d (slot 0 is for keys of the legacy shard)", s.ID, s.Slot, keyslot.MaxSlot)
	}
	if s.State != "" {
		if _, err := proxyapi.ParseState(string(s.State)); err != nil {
			return fmt.Errorf("shard %q: %w", s.ID, err)
		}
	}
	if _, err := shardconn.ParseTLS(s.TLS); err != nil {
		return fmt.Errorf("shard %q: %w", s.ID, err)
	}
	if s.Credential != "" {
		if err := registryapi.CheckCredentialName(s.Credential); err != nil {
			return fmt.Errorf("shard %q: %w", s.ID, err)
		}
	}
	if s.REST != "" {
		if err := registryapi.CheckREST(s.REST); err != nil {
			return fmt.Errorf("shard %q: %w", s.ID, err)
		}
	}
	for _, t := range s.PhysicalTenants {
		if err := physicaltenant.Check(t); err != nil {
			return fmt.Errorf("shard %q: %w", s.ID, err)
		}
	}
	return nil
}

// Core is the routing core of a running proxy: its shards, their state
// and books, and the loops that keep them (health, admission, the
// registry's follow). The fronts turn each call into calls on it.
type Core struct {
	cfg Config
	// registryLost is when the registry's watch broke, while it stays
	// broken (nil: heard, or no registry followed).
	registryLost atomic.Pointer[time.Time]
	// access is the upstream CA and the proxy's credentials, which
	// CloseShards closes.
	access  *shardconn.Access
	metrics *Metrics
	index   *LedgerIndex
	// deploySlot is held by the one client deployment under way:
	// deployments are serialised per proxy, so that every shard gives a
	// process the same version, each on every shard within
	// DeployTimeout; a caller waits for the slot no longer than its
	// deadline.
	deploySlot chan struct{}

	// set is the shards and pool weights in force, replaced whole under
	// members by every change and read without a lock.
	set     atomic.Pointer[shardSet]
	members sync.Mutex

	// addr and adminAddr are where the fronts listen, which the proxy
	// registers in the registry it follows.
	addr, adminAddr net.Addr
	// stopping ends long polls and job streams when the proxy stops, so a
	// graceful stop does not wait out their timeouts.
	stopping context.Context
	stop     context.CancelFunc
	follow   membership
	// stopFollow cancels the registry watch and a sync in progress (a
	// replay) when the proxy stops.
	stopFollow context.CancelFunc

	// owned are the goroutines the proxy starts besides its handlers
	// (hand-backs, long polls it no longer waits for, the registry
	// follow): Close waits for them. bg is their context, cancelled when
	// Close runs out of time.
	owned    sync.WaitGroup
	bg       context.Context
	cancelBG context.CancelFunc

	// overloadAt is the in-flight count past which a shard is overloaded:
	// OverloadLimit plus OverloadExcess percent.
	overloadAt int64

	long    LongCalls  // open long polls and job streams, for a stop to end
	ejectMu sync.Mutex // one ejection decision at a time

	log     *slog.Logger
	repeats *logs.Repeats // lines that can repeat many times a second
}

// New checks the configuration; Open connects to the shards and Run
// starts the loops.
func New(cfg Config) (*Core, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Core{cfg: cfg, index: newLedgerIndex(), stopFollow: func() {}, log: logs.Or(cfg.Logger), deploySlot: make(chan struct{}, 1)}
	p.repeats = logs.NewRepeats(p.log, 0, nil)
	access, err := shardconn.NewAccess(cfg.UpstreamCA, cfg.Credentials, p.log)
	if err != nil {
		return nil, err
	}
	p.access = access
	p.overloadAt = cfg.OverloadLimit + cfg.OverloadLimit*int64(cfg.OverloadExcess)/100
	p.bg, p.cancelBG = context.WithCancel(context.Background())
	p.stopping, p.stop = context.WithCancel(p.bg)
	p.set.Store(emptySet)
	p.follow.wake = make(chan struct{}, 1)
	p.follow.onSync = cfg.OnSync
	p.metrics = newMetrics(func() float64 { return float64(p.index.size()) }, func() float64 { return float64(p.long.count()) },
		func() float64 {
			if _, lost := p.RegistryLost(); lost {
				return 0
			}
			return 1
		})
	return p, nil
}

// AddShard connects a shard and replays the ledger to it; it takes new
// instances and client deployments only once that is done. It waits for
// the replay (Open's shards: the proxy serves once they are replayed)
// when wait is set; else the replay runs on by itself (the registry's
// follow loop must not wait on one shard).
func (p *Core) AddShard(ctx context.Context, sc proxyapi.ShardConfig, wait bool) error {
	if err := validateShard(sc); err != nil {
		return err
	}
	if taken := p.set.Load().bySlot[sc.Slot]; taken != nil {
		return fmt.Errorf("slot %d is taken by shard %q", sc.Slot, taken.ID)
	}
	t, err := p.access.Target(sc.ID, sc.Addr, sc.TLS, sc.Credential)
	if err != nil {
		return err
	}
	n, advertised := p.cfg.ConnsPerShard, uint32(0)
	if n == 0 {
		n, advertised = upstream.Plan(ctx, t, p.cfg.MaxInflightPerShard)
	}
	conn, err := upstream.Dial(sc.ID, t, n, p.cfg.Front == FrontFrames)
	if err != nil {
		return err
	}
	conn.Advertised = advertised
	s := newShard(sc, conn)
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	refused, err := s.checkTopology(tctx)
	if err != nil {
		s.Conn.Close()
		return err
	}
	s.health.mark()
	s.inflightGauge = p.metrics.inflight.WithLabelValues(s.ID)
	p.metrics.up.WithLabelValues(s.ID).Set(1)
	p.metrics.authRefused.WithLabelValues(s.ID).Set(0)
	p.noteAuth(s, refused)
	s.Choices = p.metrics.choices.WithLabelValues(s.ID)
	p.members.Lock()
	set := p.set.Load()
	if taken := set.bySlot[s.Slot]; taken != nil {
		p.members.Unlock()
		s.Conn.Close()
		return fmt.Errorf("slot %d is taken by shard %q", sc.Slot, taken.ID)
	}
	p.set.Store(set.with(s, p.cfg.LegacyShard))
	p.members.Unlock()
	p.logShard(slog.LevelInfo, s, "shard added", "address", s.Addr, "pool", s.Pool(), "state", s.State(),
		"partitions", s.partitions.Load(), "connections", s.Conn.Connections())
	done := p.startReplay(s, wait)
	if !wait {
		return nil
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("shard %s: replay the deployment ledger: %w", s.ID, ctx.Err())
	}
}

// SetState changes a shard's state, as the registry or an operator does.
func (p *Core) SetState(id string, st proxyapi.State) error {
	s := p.ShardByID(id)
	if s == nil {
		return fmt.Errorf("no shard %q", id)
	}
	p.setState(s, st, "shard state changed", "set by an operator")
	return nil
}

// setState assigns s a state and logs msg when that changed it.
func (p *Core) setState(s *Shard, st proxyapi.State, msg, reason string) {
	if from := s.swapState(st); from != st {
		p.logShard(slog.LevelInfo, s, msg, "from", from, "to", st, "reason", reason)
	}
}

// UpstreamRoots are the CAs a shard's certificate is checked against
// (nil: the system's).
func (p *Core) UpstreamRoots() *x509.CertPool { return p.access.Roots() }

// ShardByID is the shard with id, or nil.
func (p *Core) ShardByID(id string) *Shard { return p.set.Load().byID(id) }

// snapshot is the shards in force, by slot; callers must not change it.
func (p *Core) Snapshot() []*Shard { return p.set.Load().all }

// ShardForKey routes a key-addressed call.
func (p *Core) ShardForKey(key int64) (*Shard, int64, error) {
	slot, raw := keyslot.Split(key)
	s := p.set.Load().forKey(slot)
	if s == nil {
		if slot == 0 {
			return nil, 0, status.Errorf(codes.NotFound, "Expected to find the shard of key %d, but it carries no shard slot and there is no legacy shard", key)
		}
		return nil, 0, status.Errorf(codes.NotFound, "Expected to find the shard of key %d, but no shard has slot %d", key, slot)
	}
	return s, raw, nil
}

// SetWeights sets each pool's share of new instances (percent); nil or
// empty places over every shard alike. Pools not named get nothing new.
func (p *Core) SetWeights(w map[string]int) {
	p.members.Lock()
	old := p.set.Load().weights
	p.set.Store(p.set.Load().withWeights(w, p.cfg.LegacyShard))
	p.metrics.weights.Reset()
	for pool, v := range w {
		p.metrics.weights.WithLabelValues(pool).Set(float64(v))
	}
	p.members.Unlock()
	// The registry sends the weights again with every cutover write.
	if !maps.Equal(old, w) {
		p.log.Info("pool weights changed", "from", registryapi.FormatWeights(old), "to", registryapi.FormatWeights(w))
	}
}

// Weights are the pool weights in force (nil: none).
func (p *Core) Weights() map[string]int { return maps.Clone(p.set.Load().weights) }

// Pick is the shard for something new (shardSet.pick) among those that
// serve the physical tenant (as the client sent it), take instances at
// now and were not tried for this request yet.
func (p *Core) Pick(now time.Time, exclude []*Shard, tenant string) *Shard {
	return p.set.Load().pick(now, func(s *Shard) bool {
		return s.takesInstances(now, p.cfg.MaxInflightPerShard) && !slices.Contains(exclude, s) && s.Serves(tenant)
	})
}

// Serving is the shards that serve the physical tenant (as the client
// sent it), in slot order: where its fan-outs go. It is never empty
// without a reason: UnservedTenant when no shard serves it.
func (p *Core) Serving(tenant string) ([]*Shard, error) {
	all := p.set.Load().all
	out := make([]*Shard, 0, len(all))
	for _, s := range all {
		if s.Serves(tenant) {
			out = append(out, s)
		}
	}
	if len(out) == 0 && len(all) > 0 {
		return nil, UnservedTenant(tenant)
	}
	return out, nil
}

// PlacementFailed is the answer to a placement that found no shard to take
// it: lastErr is the last shard's refusal (nil: no shard was eligible),
// exhausted whether some shard answered RESOURCE_EXHAUSTED; a physical
// tenant no shard serves is named as such.
func (p *Core) PlacementFailed(tenant string, lastErr error, exhausted bool) error {
	switch {
	case lastErr == nil && !p.ServesAnywhere(tenant):
		return UnservedTenant(tenant)
	case lastErr == nil:
		return status.Error(codes.ResourceExhausted, "Expected to place the request on a shard, but every shard is at capacity (its backlog, instances or requests in flight), cooling off after backpressure, or not UP. Please try again later.")
	case exhausted:
		return status.Errorf(codes.ResourceExhausted, "Expected to place the request on a shard, but every shard rejected it: %s", status.Convert(lastErr).Message())
	}
	return status.Errorf(codes.Unavailable, "Expected to place the request on a shard, but none could be reached: %s", status.Convert(lastErr).Message())
}

// UnservedTenant is the answer to work for a physical tenant no shard of
// the federation serves: NOT_FOUND, as a gateway answers for a tenant it
// does not have, naming it. A placement that finds the shards of a served
// tenant all busy or down gets the usual UNAVAILABLE instead.
func UnservedTenant(tenant string) error {
	return status.Errorf(codes.NotFound, "Expected to route a request for physical tenant '%s', but no shard of the federation serves it", physicaltenant.Of(tenant))
}

// ServesAnywhere reports whether some shard serves the physical tenant.
func (p *Core) ServesAnywhere(tenant string) bool {
	return slices.ContainsFunc(p.set.Load().all, func(s *Shard) bool { return s.Serves(tenant) })
}

// enter counts a call to s in flight, or refuses it at the proxy's
// limit (a *LimitError).
func (p *Core) Enter(s *Shard, rpc string) error {
	n := s.inflight.Add(1)
	if limit := p.cfg.MaxInflightPerShard; limit > 0 && n > limit && rpc != "Topology" {
		s.inflight.Add(-1)
		p.metrics.limited.WithLabelValues(s.ID).Inc()
		p.logShardRepeating(slog.LevelWarn, s, "shard refusing calls at its in-flight limit", "limit", limit)
		return &LimitError{shard: s.ID, limit: limit}
	}
	if p.cfg.OverloadLimit > 0 && n > p.overloadAt && !s.overloaded.Load() && s.overloaded.CompareAndSwap(false, true) {
		p.metrics.overloaded.WithLabelValues(s.ID).Set(1)
		// Overload can flap with bursts: one kind of line both ways.
		p.logShardAs(slog.LevelWarn, s, "overload", "shard overloaded, refusing new instances", "inFlight", n, "overloadAt", p.overloadAt)
	}
	s.inflightGauge.Set(float64(n))
	return nil
}

// leave ends a call enter let through with the shard's answer;
// clientEnded: the client's deadline or cancellation ended it, which
// says nothing of the shard.
func (p *Core) Leave(s *Shard, rpc string, err error, clientEnded bool) {
	n := s.inflight.Add(-1)
	s.inflightGauge.Set(float64(n))
	if n < p.cfg.OverloadLimit && s.overloaded.Load() && s.overloaded.CompareAndSwap(true, false) {
		p.metrics.overloaded.WithLabelValues(s.ID).Set(0)
		p.logShardAs(slog.LevelInfo, s, "overload", "shard no longer overloaded, admitting new instances", "inFlight", n, "limit", p.cfg.OverloadLimit)
	}
	p.upstreamCounter(s, rpc, status.Code(err)).Inc()
	if err != nil {
		s.NoteError(err)
		p.noteFailure(clientEnded, s, err)
	} else if s.health.consecutive.Load() != 0 {
		s.health.consecutive.Store(0)
	}
}

// LimitError is a call the proxy refused for the shard's in-flight limit:
// RESOURCE_EXHAUSTED to the client, but not the shard's answer (no
// cooling off).
type LimitError struct {
	shard string
	limit int64
}

// Error and GRPCStatus: RESOURCE_EXHAUSTED, naming the limit.
func (e *LimitError) Error() string { return e.GRPCStatus().Message() }

func (e *LimitError) GRPCStatus() *status.Status {
	return status.Newf(codes.ResourceExhausted, "Expected to send the request to shard %s, but it has %d requests in flight, the proxy's limit (--max-inflight-per-shard). Please try again later.", e.shard, e.limit)
}

type rpcCode struct {
	rpc  string
	code codes.Code
}

func (p *Core) upstreamCounter(s *Shard, rpc string, code codes.Code) prometheus.Counter {
	k := rpcCode{rpc, code}
	if c, ok := s.upstream.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := p.metrics.upstream.WithLabelValues(s.ID, rpc, code.String())
	s.upstream.Store(k, c)
	return c
}

// AdminURL is the admin address's base URL (https with AdminTLS), or ""
// before the admin listens.
func (p *Core) AdminURL() string {
	if p.adminAddr == nil {
		return ""
	}
	scheme := "http"
	if p.cfg.AdminTLS != nil {
		scheme = "https"
	}
	return scheme + "://" + p.adminAddr.String()
}

// CloseShards closes every shard's connections, and the credentials
// they carried.
func (p *Core) CloseShards() {
	for _, s := range p.Snapshot() {
		s.Conn.Close()
	}
	p.access.Close()
}

// The fronts a proxy can serve clients with.
const (
	// FrontFrames speaks HTTP/2 itself: a call that goes to one shard
	// and needs only its keys rewritten is forwarded as frames; the rest
	// go to the grpc-go server (FrontGRPC's) through its ServeHTTP.
	FrontFrames = "frames"
	// FrontGRPC serves every call with grpc-go.
	FrontGRPC = "grpc"
)

// Shards reports every shard's state.
func (p *Core) Shards() []proxyapi.ShardStatus {
	now := time.Now()
	out := []proxyapi.ShardStatus{}
	for _, s := range p.Snapshot() {
		st := proxyapi.ShardStatus{ID: s.ID, Slot: s.Slot, Address: s.Addr, State: s.RoutingState(), AssignedState: s.State(), Health: s.healthStatus(now),
			Pool: s.Pool(), PhysicalTenants: s.PhysicalTenants, Partitions: s.partitions.Load(), Credential: s.Conn.Credential().Name(), InFlight: s.inflight.Load(), Connections: s.Conn.Connections(), MaxStreams: s.Conn.Advertised, CoolingOff: s.cooling(now),
			Overloaded: s.overloaded.Load(), Backlog: s.backlogStatus()}
		s.mu.Lock()
		if s.lastErr != "" {
			at := s.lastAt.UTC()
			st.LastError, st.LastErrorAt = s.lastErr, &at
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Config is the configuration in force, defaults filled in.
func (p *Core) Config() Config { return p.cfg }

// Open loads the ledger and connects to every configured shard, refusing
// one with too many partitions.
func (p *Core) Open(ctx context.Context) error {
	if err := p.RefreshLedger(ctx); err != nil {
		return err
	}
	for _, sc := range p.cfg.Shards {
		if err := p.AddShard(ctx, sc, true); err != nil {
			p.CloseShards()
			return err
		}
	}
	return nil
}

// Run starts the core's own loops: repeated log lines, health checks,
// admission, and with a dynamic shard set the registry's follow, where
// the proxy registers itself with the addresses its fronts bound (admin
// nil: it does not register).
func (p *Core) Run(ctx context.Context, addr, admin net.Addr) {
	p.addr, p.adminAddr = addr, admin
	p.owned.Go(p.flushLogs)
	if p.cfg.Health.Interval > 0 {
		p.owned.Go(p.healthLoop)
	}
	if p.cfg.MaxBacklog > 0 || p.cfg.InstanceLimit != InstanceLimitOff {
		p.owned.Go(p.admissionLoop)
	}
	if p.cfg.Dynamic {
		var fctx context.Context
		fctx, p.stopFollow = context.WithCancel(context.WithoutCancel(ctx))
		p.owned.Go(func() { p.followLoop(fctx) })
		if p.cfg.Registry != nil {
			p.owned.Go(func() { p.followRegistry(fctx) })
			if err := p.announce(fctx); err != nil {
				p.log.Error("the proxy cannot register itself in the registry", "app", registryapi.ProxiesApp, "err", err)
			}
		}
	}
}

// Go runs f as one of the goroutines Shutdown waits for: the fronts'
// listeners, hand-backs, long polls no caller waits for any more.
func (p *Core) Go(f func()) { p.owned.Go(f) }

// Background is the context of what Go runs: cancelled when a stop runs
// out of time (CancelBackground).
func (p *Core) Background() context.Context { return p.bg }

// Stopping ends when the proxy stops: long polls and job streams end
// with it rather than wait out their timeouts.
func (p *Core) Stopping() context.Context { return p.stopping }

// CancelBackground cuts short whatever still runs on the proxy's behalf.
func (p *Core) CancelBackground() { p.cancelBG() }

// StopFollowing cancels the registry's watch and a sync in progress (a
// replay): the first step of a stop.
func (p *Core) StopFollowing() { p.stopFollow() }

// EndLongCalls ends the open long polls and job streams, DrainBatch a
// second until ctx ends, then the rest at once, and stops the core.
func (p *Core) EndLongCalls(ctx context.Context) {
	p.drainLongCalls(ctx)
	p.stop()
	p.long.end(0) // those the drain had no time for
}

// Shutdown waits for everything Go started, writes the repeated lines'
// last counts and closes every shard's connections: the last step of a
// stop, once the fronts stopped.
func (p *Core) Shutdown() {
	p.owned.Wait()
	p.repeats.FlushAll()
	p.cancelBG()
	p.CloseShards()
}

// Metrics are the proxy's Prometheus metrics, the fronts' and the core's.
func (p *Core) Metrics() *Metrics { return p.metrics }

// Logger is where the proxy's state changes are logged.
func (p *Core) Logger() *slog.Logger { return p.log }

// Ledger is the index of the deployment ledger: which process a
// definition key is on each shard, and which messages start a process.
func (p *Core) Ledger() *LedgerIndex { return p.index }

// LongCalls are the open long polls and job streams, which a stop ends.
func (p *Core) LongCalls() *LongCalls { return &p.long }

// TakeDeploySlot waits, no longer than ctx, for the one deployment
// under way to end, and returns the release of the slot it takes.
func (p *Core) TakeDeploySlot(ctx context.Context) (release func(), err error) {
	select {
	case p.deploySlot <- struct{}{}:
		return func() { <-p.deploySlot }, nil
	case <-ctx.Done():
		return nil, status.Errorf(status.FromContextError(ctx.Err()).Code(), "waiting for the deployment under way in the proxy: %v", ctx.Err())
	}
}

// IsLegacy reports whether s is the legacy shard: keys without a slot
// are its.
func (p *Core) IsLegacy(s *Shard) bool { return s != nil && p.set.Load().legacy == s }

// Close stops a core that runs without fronts: the registry's follow,
// long calls, its goroutines and shard connections, as a proxy's Close
// does after its fronts stopped. When ctx ends first, what still runs is
// cut short.
func (p *Core) Close(ctx context.Context) error {
	defer context.AfterFunc(ctx, p.CancelBackground)()
	p.StopFollowing()
	p.EndLongCalls(ctx)
	p.Shutdown()
	return nil
}
