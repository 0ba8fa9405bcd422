// Package proxy is the federation proxy: it serves the Zeebe 8.5 gateway
// API and spreads one workload over several Zeebe clusters (shards), so
// that clients keep using one gateway address and change nothing. The
// routing contract is "The federation contract" in docs/architecture.md: the shard's
// slot in every key, deployments to every shard, new instances by
// power-of-two-choices with explicit backpressure, jobs from every shard
// that holds work, key-addressed calls to the key's shard.
package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/camunda/zeebe/clients/go/v8/pkg/pb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardctl/shardctl/internal/certs"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/logs"
	"github.com/shardctl/shardctl/internal/proxy/grpcwire"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/upstream"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
)

// Config of a proxy. Zero values take the defaults below.
type Config struct {
	Listen      string // gateway address for clients
	AdminListen string // /metrics, /healthz, /readyz, /shards
	Shards      []ShardConfig
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
	// InstanceLimit is the most root instances in flight a shard with a
	// metrics URL is given: InstanceLimitAuto (0) learns it from the
	// shard's completions (see instances.go), InstanceLimitOff (-1)
	// gives no limit, a positive number is fixed.
	InstanceLimit int64
	// CoolingOff is how long a shard that answered RESOURCE_EXHAUSTED gets
	// no new instances.
	CoolingOff time.Duration
	// Ledger keeps deployments; nil keeps them in memory.
	Ledger ledger.Ledger
	// Profiling serves Go's /debug/pprof on the admin address.
	Profiling bool
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
	// Front is how clients are served: FrontFrames or FrontGRPC (""
	// takes DefaultFront).
	Front string
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

	streamWorkers = 256

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
		return fmt.Errorf("instance limit %d: want a positive number, 0 (learned) or -1 (off)", c.InstanceLimit)
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

func validateShard(s ShardConfig) error {
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
	if _, err := upstream.ParseTLS(s.TLS); err != nil {
		return fmt.Errorf("shard %q: %w", s.ID, err)
	}
	return nil
}

// Proxy is a running federation proxy.
type Proxy struct {
	cfg           Config
	upstreamRoots *x509.CertPool // nil: the system's
	metrics       *metrics
	index         *ledgerIndex
	deploy        sync.Mutex // deployments are serialised per proxy

	// set is the shards and pool weights in force, replaced whole under
	// members by every change and read without a lock.
	set     atomic.Pointer[shardSet]
	members sync.Mutex

	grpc      *grpc.Server
	gateway   *server     // the handlers, which the frame front calls itself
	frames    *frameFront // with FrontFrames: it serves clients, grpc-go what it hands on
	addr      net.Addr
	admin     *http.Server
	adminAddr net.Addr
	ready     atomic.Bool
	rr        atomic.Uint64 // where the next job sweep starts
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
	failed   chan error // what ended a listener early
	closed   sync.Once
	closeErr error

	// overloadAt is the in-flight count past which a shard is overloaded:
	// OverloadLimit plus OverloadExcess percent.
	overloadAt int64

	long    longCalls  // open long polls and job streams, for a stop to end
	ejectMu sync.Mutex // one ejection decision at a time

	log     *slog.Logger
	repeats *logs.Repeats // lines that can repeat many times a second
}

// New checks the configuration; Start connects and serves.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Proxy{cfg: cfg, index: newLedgerIndex(), stopFollow: func() {}, failed: make(chan error, 2), log: logs.Or(cfg.Logger)}
	p.repeats = logs.NewRepeats(p.log, 0, nil)
	if cfg.UpstreamCA != "" {
		roots, err := certs.Pool(cfg.UpstreamCA)
		if err != nil {
			return nil, fmt.Errorf("--upstream-ca: %w", err)
		}
		p.upstreamRoots = roots
	}
	p.overloadAt = cfg.OverloadLimit + cfg.OverloadLimit*int64(cfg.OverloadExcess)/100
	p.bg, p.cancelBG = context.WithCancel(context.Background())
	p.stopping, p.stop = context.WithCancel(p.bg)
	p.set.Store(emptySet)
	p.follow.wake = make(chan struct{}, 1)
	p.follow.onSync = cfg.OnSync
	p.metrics = newMetrics(func() float64 { return float64(p.index.size()) }, func() float64 { return float64(p.long.count()) })
	return p, nil
}

// Start connects to every shard (refusing one with too many partitions),
// loads the ledger and serves.
func (p *Proxy) Start(ctx context.Context) error {
	if err := p.RefreshLedger(ctx); err != nil {
		return err
	}
	for _, sc := range p.cfg.Shards {
		if err := p.AddShard(ctx, sc); err != nil {
			p.closeShards()
			return err
		}
	}
	ln, err := net.Listen("tcp", p.cfg.Listen)
	if err != nil {
		p.closeShards()
		return fmt.Errorf("listen for clients on %s: %w", p.cfg.Listen, err)
	}
	p.addr = ln.Addr()
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(grpcwire.MaxRecvMsgSize),
		// As Zeebe's gateway: clients may ping every 30 s (the Zeebe
		// client pings every 45 s; grpc-go's default policy would end
		// its connection after two pings).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second, PermitWithoutStream: true}),
		// A unary call holds its worker while it waits for the shard, so
		// there must be about as many workers as calls in flight; past
		// them grpc-go starts a goroutine per call, whose stack then grows
		// on every call (stack growth fell from 5% to 1% of the proxy's
		// CPU at 64 in flight).
		grpc.NumStreamWorkers(streamWorkers)}
	if p.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(p.cfg.TLS.Config())))
	}
	p.grpc = grpc.NewServer(opts...)
	p.gateway = &server{p: p}
	pb.RegisterGatewayServer(p.grpc, p.gateway)
	if p.cfg.Front == FrontFrames {
		var tc *tls.Config
		if p.cfg.TLS != nil {
			tc = p.cfg.TLS.Config()
		}
		p.frames = newFrameFront(p, ln, tc)
		p.owned.Go(func() {
			if err := p.frames.serve(); err != nil {
				p.failed <- fmt.Errorf("serve clients on %s: %w", p.addr, err)
			}
		})
	} else {
		p.owned.Go(func() {
			if err := p.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				p.failed <- fmt.Errorf("serve clients on %s: %w", p.addr, err)
			}
		})
	}
	if p.cfg.AdminListen != "" {
		aln, err := net.Listen("tcp", p.cfg.AdminListen)
		if err != nil {
			p.grpc.Stop()
			p.closeShards()
			return fmt.Errorf("listen for admin on %s: %w", p.cfg.AdminListen, err)
		}
		p.adminAddr = aln.Addr()
		p.admin = &http.Server{Handler: p.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
		p.owned.Go(func() {
			if err := p.admin.Serve(aln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				p.failed <- fmt.Errorf("serve admin on %s: %w", p.adminAddr, err)
			}
		})
	}
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
	p.ready.Store(true)
	return nil
}

// AddShard connects a shard, replays the ledger to it, and only then lets
// it take new instances.
func (p *Proxy) AddShard(ctx context.Context, sc ShardConfig) error {
	if err := validateShard(sc); err != nil {
		return err
	}
	if taken := p.set.Load().bySlot[sc.Slot]; taken != nil {
		return fmt.Errorf("slot %d is taken by shard %q", sc.Slot, taken.ID)
	}
	n, advertised := p.cfg.ConnsPerShard, uint32(0)
	if n == 0 {
		n, advertised = upstream.Plan(ctx, sc.Addr, sc.TLS, p.upstreamRoots, p.cfg.MaxInflightPerShard)
	}
	conn, err := upstream.Dial(sc.ID, sc.Addr, sc.TLS, p.upstreamRoots, n, p.cfg.Front == FrontFrames)
	if err != nil {
		return err
	}
	conn.Advertised = advertised
	s := newShard(sc, conn)
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.checkTopology(tctx); err != nil {
		s.conn.Close()
		return err
	}
	if err := p.replay(ctx, s); err != nil {
		s.conn.Close()
		return err
	}
	s.inflightGauge = p.metrics.inflight.WithLabelValues(s.ID)
	p.metrics.up.WithLabelValues(s.ID).Set(1)
	s.choices = p.metrics.choices.WithLabelValues(s.ID)
	p.members.Lock()
	defer p.members.Unlock()
	set := p.set.Load()
	if taken := set.bySlot[s.Slot]; taken != nil {
		s.conn.Close()
		return fmt.Errorf("slot %d is taken by shard %q", sc.Slot, taken.ID)
	}
	p.set.Store(set.with(s, p.cfg.LegacyShard))
	p.logShard(slog.LevelInfo, s, "shard added", "address", s.Addr, "pool", s.Pool(), "state", s.State(),
		"partitions", s.partitions, "connections", s.conn.Connections())
	return nil
}

// replay deploys every ledger entry to a joining shard, in order, and
// records the keys it issued.
func (p *Proxy) replay(ctx context.Context, s *shard) error {
	p.deploy.Lock()
	defer p.deploy.Unlock()
	deployments, err := p.cfg.Ledger.All(ctx)
	if err != nil {
		err = fmt.Errorf("read the deployment ledger: %w", err)
		p.logShardRepeating(slog.LevelWarn, s, "ledger replay failed", "err", err)
		return err
	}
	if len(deployments) == 0 {
		return nil
	}
	// A shard the health checks keep trying may start a replay every
	// interval: these lines may repeat.
	start := time.Now()
	p.logShardRepeating(slog.LevelInfo, s, "ledger replay started", "deployments", len(deployments))
	if err := p.replayLocked(ctx, s, deployments); err != nil {
		p.logShardRepeating(slog.LevelWarn, s, "ledger replay failed", "deployments", len(deployments), "err", err)
		return err
	}
	p.logShardRepeating(slog.LevelInfo, s, "ledger replay finished", "deployments", len(deployments), "took", logDuration(time.Since(start)))
	return nil
}

// replayLocked deploys deployments to s; callers hold p.deploy.
func (p *Proxy) replayLocked(ctx context.Context, s *shard, deployments []ledger.Deployment) error {
	for _, d := range deployments {
		req := &pb.DeployResourceRequest{}
		for _, r := range d.Resources {
			req.Resources = append(req.Resources, &pb.Resource{Name: r.Name, Content: r.Content})
		}
		resp, err := s.conn.Client().DeployResource(ctx, req)
		if err != nil {
			return fmt.Errorf("shard %s: replay deployment %d of the ledger: %w", s.ID, d.Seq, err)
		}
		keys := map[string]int64{}
		for _, dep := range resp.GetDeployments() {
			if pm := dep.GetProcess(); pm != nil {
				keys[ledger.ProcessRef(pm.GetBpmnProcessId(), pm.GetVersion())] = pm.GetProcessDefinitionKey()
			}
		}
		if err := p.cfg.Ledger.SetKeys(ctx, d.Seq, s.ID, keys); err != nil {
			return err
		}
		mine := ledger.Deployment{Seq: d.Seq, MessageStarts: d.MessageStarts}
		for _, pr := range d.Processes {
			if k, ok := keys[ledger.ProcessRef(pr.BpmnProcessID, pr.Version)]; ok {
				mine.Processes = append(mine.Processes, ledger.ProcessID{BpmnProcessID: pr.BpmnProcessID, Version: pr.Version, Keys: map[string]int64{s.ID: k}})
			}
		}
		p.index.add(mine)
	}
	return nil
}

// SetState changes a shard's state, as the registry or an operator does.
func (p *Proxy) SetState(id string, st proxyapi.State) error {
	s := p.shardByID(id)
	if s == nil {
		return fmt.Errorf("no shard %q", id)
	}
	p.setState(s, st, "shard state changed", "set by an operator")
	return nil
}

// setState assigns s a state and logs msg when that changed it.
func (p *Proxy) setState(s *shard, st proxyapi.State, msg, reason string) {
	if from := s.swapState(st); from != st {
		p.logShard(slog.LevelInfo, s, msg, "from", from, "to", st, "reason", reason)
	}
}

func (p *Proxy) shardByID(id string) *shard { return p.set.Load().byID(id) }

// snapshot is the shards in force, by slot; callers must not change it.
func (p *Proxy) snapshot() []*shard { return p.set.Load().all }

// shardForKey routes a key-addressed call.
func (p *Proxy) shardForKey(key int64) (*shard, int64, error) {
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
func (p *Proxy) SetWeights(w map[string]int) {
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
func (p *Proxy) Weights() map[string]int { return maps.Clone(p.set.Load().weights) }

// pick is the shard for something new (shardSet.pick) among those that
// take instances at now and were not tried for this request yet.
func (p *Proxy) pick(now time.Time, exclude []*shard) *shard {
	return p.set.Load().pick(now, func(s *shard) bool {
		return s.takesInstances(now, p.cfg.MaxInflightPerShard) && !slices.Contains(exclude, s)
	})
}

// outgoing forwards the client's authorization to a shard.
func outgoing(ctx context.Context) context.Context {
	// ValueFromIncomingContext does not copy the whole header map.
	if auth := metadata.ValueFromIncomingContext(ctx, "authorization"); len(auth) > 0 {
		return metadata.AppendToOutgoingContext(ctx, "authorization", auth[0])
	}
	return ctx
}

// call runs one request to a shard, with in-flight accounting, the
// per-shard limit, overload and health bookkeeping, and metrics.
func call[T any](ctx context.Context, p *Proxy, s *shard, rpc string, fn func(context.Context, pb.GatewayClient) (T, error)) (T, error) {
	if err := p.enter(s, rpc); err != nil {
		var zero T
		return zero, err
	}
	v, err := fn(outgoing(ctx), s.conn.Client())
	p.leave(s, rpc, err, ctx.Err() != nil)
	return v, err
}

// enter counts a call to s in flight, or refuses it at the proxy's
// limit (a *limitError).
func (p *Proxy) enter(s *shard, rpc string) error {
	n := s.inflight.Add(1)
	if limit := p.cfg.MaxInflightPerShard; limit > 0 && n > limit && rpc != "Topology" {
		s.inflight.Add(-1)
		p.metrics.limited.WithLabelValues(s.ID).Inc()
		p.logShardRepeating(slog.LevelWarn, s, "shard refusing calls at its in-flight limit", "limit", limit)
		return &limitError{shard: s.ID, limit: limit}
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
func (p *Proxy) leave(s *shard, rpc string, err error, clientEnded bool) {
	n := s.inflight.Add(-1)
	s.inflightGauge.Set(float64(n))
	if n < p.cfg.OverloadLimit && s.overloaded.Load() && s.overloaded.CompareAndSwap(true, false) {
		p.metrics.overloaded.WithLabelValues(s.ID).Set(0)
		p.logShardAs(slog.LevelInfo, s, "overload", "shard no longer overloaded, admitting new instances", "inFlight", n, "limit", p.cfg.OverloadLimit)
	}
	p.upstreamCounter(s, rpc, status.Code(err)).Inc()
	if err != nil {
		s.noteError(err)
		p.noteFailure(clientEnded, s, err)
	} else if s.health.consecutive.Load() != 0 {
		s.health.consecutive.Store(0)
	}
}

// limitError is a call the proxy refused for the shard's in-flight limit:
// RESOURCE_EXHAUSTED to the client, but not the shard's answer (no
// cooling off).
type limitError struct {
	shard string
	limit int64
}

func (e *limitError) Error() string { return e.GRPCStatus().Message() }

func (e *limitError) GRPCStatus() *status.Status {
	return status.Newf(codes.ResourceExhausted, "Expected to send the request to shard %s, but it has %d requests in flight, the proxy's limit (--max-inflight-per-shard). Please try again later.", e.shard, e.limit)
}

type rpcCode struct {
	rpc  string
	code codes.Code
}

func (p *Proxy) upstreamCounter(s *shard, rpc string, code codes.Code) prometheus.Counter {
	k := rpcCode{rpc, code}
	if c, ok := s.upstream.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c := p.metrics.upstream.WithLabelValues(s.ID, rpc, code.String())
	s.upstream.Store(k, c)
	return c
}

// Addr is the client address actually bound.
func (p *Proxy) Addr() net.Addr { return p.addr }

// AdminAddr is the admin address actually bound, or nil.
func (p *Proxy) AdminAddr() net.Addr { return p.adminAddr }

// Failed delivers what ended a listener while the proxy ran; a caller
// that serves until a signal should stop on it too.
func (p *Proxy) Failed() <-chan error { return p.failed }

// Close stops serving gracefully: /readyz turns 503 and the proxy leaves
// the registry; after ShutdownDelay it accepts no new calls; open long
// polls and job streams end DrainBatch a second (the workers reconnect to
// another replica; buffered jobs are handed back); in-flight calls and
// hand-backs finish. When ctx ends first, whatever still runs is cut
// short. It waits for everything it started, and a second call returns
// what the first did.
func (p *Proxy) Close(ctx context.Context) error {
	p.closed.Do(func() { p.closeErr = p.close(ctx) })
	return p.closeErr
}

func (p *Proxy) close(ctx context.Context) error {
	// Out of time: whatever still runs on the proxy's behalf ends now.
	defer context.AfterFunc(ctx, p.cancelBG)()
	p.ready.Store(false)
	p.stopFollow()
	if d := p.cfg.ShutdownDelay; d > 0 && p.grpc != nil {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	stopped := make(chan struct{})
	switch {
	case p.frames != nil:
		// The front's clients first: grpc-go serves only what it hands on.
		go func() { p.frames.shutdown(ctx); p.grpc.GracefulStop(); close(stopped) }()
	case p.grpc != nil:
		go func() { p.grpc.GracefulStop(); close(stopped) }()
	default:
		close(stopped)
	}
	p.drainLongCalls(ctx)
	p.stop()
	p.long.end(0) // those the drain had no time for
	select {
	case <-stopped:
	case <-ctx.Done():
		if p.grpc != nil {
			p.grpc.Stop()
		}
		<-stopped
	}
	var err error
	if p.admin != nil {
		err = p.admin.Shutdown(ctx)
	}
	p.owned.Wait()
	p.repeats.FlushAll()
	p.cancelBG()
	p.closeShards()
	return err
}

func (p *Proxy) closeShards() {
	for _, s := range p.snapshot() {
		s.conn.Close()
	}
}
