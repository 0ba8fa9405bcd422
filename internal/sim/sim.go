// Package sim is a Zeebe-gateway-compatible shard simulator: one process
// that behaves like a Zeebe 8.5 cluster at the gateway API (keys,
// backpressure, job activation and push, messages, signals) and in its
// metric names, with a capacity model that can reproduce the knee of an
// overloaded cluster. It also serves the REST API's command endpoints
// (/v2, internal/restgateway) over the same engine. shardctl's proxy,
// signals, drain and demo run against it because Zeebe itself cannot run
// everywhere they are tested.
// It is a runtime's: it never imports probes/, commands/, tui/ or migrate/
// (internal/architecture checks).
package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/shardctl/shardctl/internal/authn"
	"github.com/shardctl/shardctl/internal/certs"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/logs"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/restgateway"
)

// Config of a simulated cluster. Zero values take the defaults below.
type Config struct {
	// Listen is the gateway (gRPC) address; port 0 picks a free one.
	Listen string
	// RESTListen serves the REST API (/v2) over the same engine as the
	// gateway; "" serves none.
	RESTListen string
	// MetricsListen serves /metrics, /healthz, /readyz and /fault/*.
	MetricsListen string
	// Partitions of the cluster (default 3, at most 127).
	Partitions int32
	// Capacity is the records per second each partition processes;
	// 0 processes as fast as possible.
	Capacity float64
	// BacklogLimit is how many client commands a partition holds before it
	// rejects new ones with RESOURCE_EXHAUSTED (default 1000; -1 never).
	BacklogLimit int
	// WriteRateLimit is flow control's write-rate limit (8.6+, played
	// from 8.8): the records per second a partition writes, a second's
	// worth in a burst; a client command past it is rejected with
	// RESOURCE_EXHAUSTED and counted as writeRateLimitExhausted, and the
	// records processing writes use it up too. 0: no limit.
	WriteRateLimit float64
	// Degrade reproduces an overloaded monolith's knee: new instances are
	// served first, and past DegradeThreshold queued records the work
	// behind them gets slower the longer the backlog grows, up to
	// DegradeMax times as slow.
	Degrade          bool
	DegradeThreshold int     // default 100
	DegradeMax       float64 // default 2
	// TimerInterval is how often job deadlines, retry backoffs, message
	// TTLs and timer catch events are checked (Zeebe: 30 s for job
	// timeouts; default here 1 s). A check writes records only for what is
	// due.
	TimerInterval time.Duration
	// Exporter names an exporter that exports every record as soon as it
	// is processed (zeebe_exporter_last_exported_position); "" exports
	// nothing, as a cluster without exporters.
	Exporter string
	// QueryHistory is how many ended instances, jobs and incidents each
	// partition keeps for the REST API's searches (default
	// DefaultQueryHistory); active ones are always kept.
	QueryHistory int
	// MaxConcurrentStreams is the SETTINGS_MAX_CONCURRENT_STREAMS the
	// gateway advertises: calls per HTTP/2 connection (0: no limit).
	MaxConcurrentStreams uint32
	// TLS, when set, serves the gateway and the REST API over TLS, as a
	// Zeebe gateway with zeebe.gateway.security.enabled.
	TLS *certs.Server
	// Logger gets one line per fault injected or ended (nil: none).
	Logger *slog.Logger
	// Version is the Zeebe release played (default DefaultVersion).
	Version Version
	// PhysicalTenants served (8.10; nil: "default" only). Each versions
	// its processes apart; instances, jobs, messages and metrics are the
	// cluster's as one (see README: what the simulator leaves out).
	PhysicalTenants []string
	// Auth, when set, is asked about every call's Authorization, gRPC and
	// REST, as a gateway with authentication on (OIDC or Basic,
	// internal/authn): a refused call gets UNAUTHENTICATED (401). The
	// metrics and admin listener stay open, as a gateway's management
	// port.
	Auth authn.Checker
	// GRPCOptions are added to the gateway's grpc-go server: a test's
	// interceptors, which see the calls as the gateway receives them.
	GRPCOptions []grpc.ServerOption
}

// Defaults.
const (
	DefaultPartitions       = 3
	DefaultBacklogLimit     = 1000
	DefaultDegradeThreshold = 100
	// DefaultDegradeMax is the most a record behind the front may cost,
	// in records: slow enough that a backlog built at twice the knee takes
	// longer to drain than it took to grow, as clusters do, and not so slow
	// that a cluster held at half its knee never works one off (5 does not).
	DefaultDegradeMax    = 3.0
	DefaultTimerInterval = time.Second
)

func (c *Config) setDefaults() error {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:26500"
	}
	if c.Version.release == "" {
		c.Version = DefaultVersion
	}
	if c.WriteRateLimit < 0 || c.WriteRateLimit > 0 && !c.Version.micrometer() {
		return fmt.Errorf("write-rate limit %g: want a positive rate, with Zeebe 8.8 or later (flow control came in 8.6)", c.WriteRateLimit)
	}
	if len(c.PhysicalTenants) > 0 && !c.Version.physicalTenants() {
		return fmt.Errorf("physical tenants %s: Zeebe %s has none (8.10 and later do)", physicaltenant.Format(c.PhysicalTenants), c.Version)
	}
	for _, t := range c.PhysicalTenants {
		if err := physicaltenant.Check(t); err != nil {
			return err
		}
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.QueryHistory < 0 {
		return fmt.Errorf("query history must be 0 (the default, %d) or more, got %d", DefaultQueryHistory, c.QueryHistory)
	}
	if c.QueryHistory == 0 {
		c.QueryHistory = DefaultQueryHistory
	}
	if c.Partitions < 1 || c.Partitions > keyslot.MaxPartitions {
		return fmt.Errorf("partitions must be between 1 and %d, got %d", keyslot.MaxPartitions, c.Partitions)
	}
	if c.Capacity < 0 || math.IsNaN(c.Capacity) || math.IsInf(c.Capacity, 0) {
		return fmt.Errorf("capacity must be 0 (unlimited) or a positive rate, got %v", c.Capacity)
	}
	switch {
	case c.BacklogLimit == 0:
		c.BacklogLimit = DefaultBacklogLimit
	case c.BacklogLimit < 0:
		c.BacklogLimit = 0 // no limit
	}
	if c.DegradeThreshold <= 0 {
		c.DegradeThreshold = DefaultDegradeThreshold
	}
	switch {
	case c.DegradeMax == 0:
		c.DegradeMax = DefaultDegradeMax
	case c.DegradeMax < 1 || math.IsNaN(c.DegradeMax) || math.IsInf(c.DegradeMax, 0):
		return fmt.Errorf("degrade max must be at least 1 (as fast as under the knee), got %v", c.DegradeMax)
	}
	if c.TimerInterval <= 0 {
		c.TimerInterval = DefaultTimerInterval
	}
	c.Logger = logs.Or(c.Logger)
	return nil
}

// Sim is a running simulated cluster.
type Sim struct {
	cfg     Config
	cluster *cluster
	gw      *gateway

	mu       sync.Mutex
	grpc     *grpc.Server
	addr     net.Addr
	rest     *http.Server
	restAddr net.Addr
	refusing bool
	ready    bool

	admin     *http.Server
	adminAddr net.Addr

	wg sync.WaitGroup
}

// New builds a simulator; Start runs it.
func New(cfg Config) (*Sim, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m := newMetrics(cfg.Version)
	c := &cluster{cfg: cfg, id: newClusterID(), repo: newRepository(), metrics: m, closing: make(chan struct{}), aborted: make(chan struct{}), stop: make(chan struct{})}
	c.pollers.gauge = m.longPolls
	c.streams.gauge = m.jobStreams
	for id := int32(1); id <= cfg.Partitions; id++ {
		p := &partition{
			id: id, cluster: c, keys: keyGenerator{partition: id},
			m: m.forPartition(id, cfg.BacklogLimit, cfg.WriteRateLimit, cfg.Exporter), state: newState(), exp: newExported(cfg.QueryHistory),
			wake: make(chan struct{}, 1), resumed: make(chan struct{}),
		}
		p.slowFactor.Store(math.Float64bits(1))
		if cfg.WriteRateLimit > 0 {
			p.writeRate = rate.NewLimiter(rate.Limit(cfg.WriteRateLimit), max(1, int(cfg.WriteRateLimit)))
		}
		c.partitions = append(c.partitions, p)
	}
	s := &Sim{cfg: cfg, cluster: c}
	s.gw = &gateway{c: c, addr: s.Addr}
	return s, nil
}

// Start binds the gateway and metrics addresses and starts processing.
func (s *Sim) Start(ctx context.Context) error {
	if err := s.listenGateway(s.cfg.Listen); err != nil {
		return err
	}
	if s.cfg.RESTListen != "" {
		if err := s.listenREST(s.cfg.RESTListen); err != nil {
			s.stopGateway()
			return err
		}
	}
	if s.cfg.MetricsListen != "" {
		ln, err := net.Listen("tcp", s.cfg.MetricsListen)
		if err != nil {
			s.stopGateway()
			s.stopREST()
			return fmt.Errorf("listen for metrics on %s: %w", s.cfg.MetricsListen, err)
		}
		s.adminAddr = ln.Addr()
		s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				_ = err // the listener closed under us; Close reports nothing more useful
			}
		}()
	}
	for _, p := range s.cluster.partitions {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			p.run(s.cluster.stop)
		}()
	}
	s.wg.Add(1)
	go s.timer()
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	return nil
}

func (s *Sim) listenGateway(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for the gateway on %s: %w", addr, err)
	}
	// Zeebe's gateway lets clients ping every 30 s
	// (zeebe.gateway.network.minKeepAliveInterval); grpc-go's default
	// would end a Zeebe client's connection, which pings every 45 s.
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(32 << 20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second, PermitWithoutStream: true})}
	if s.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.cfg.TLS.Config())))
	}
	if s.cfg.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(s.cfg.MaxConcurrentStreams))
	}
	if s.cfg.Auth != nil {
		opts = append(opts, authn.ServerOptions(s.cfg.Auth)...)
	}
	if s.cfg.Version.physicalTenants() {
		// Older releases ignore the header: their calls skip the check.
		opts = append(opts, s.cluster.physicalTenantInterceptors()...)
	}
	srv := grpc.NewServer(append(opts, s.cfg.GRPCOptions...)...)
	pb.RegisterGatewayServer(srv, s.gw)
	s.mu.Lock()
	s.grpc, s.addr = srv, ln.Addr()
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// listenREST serves the REST API over the gateway, as a Zeebe 8.8
// gateway serves both on one engine.
func (s *Sim) listenREST(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for the REST API on %s: %w", addr, err)
	}
	ro := restgateway.Options{Logger: s.cfg.Logger, Queries: queries{s.cluster}, PhysicalTenant: s.cluster.restPhysicalTenant}
	if s.cfg.Auth != nil {
		ro.Authenticate = s.cfg.Auth.Check
	}
	srv := &http.Server{Handler: restgateway.Handler(s.gw, ro), ReadHeaderTimeout: 10 * time.Second}
	serve := func() error { return srv.Serve(ln) }
	if s.cfg.TLS != nil {
		// As the gateway: a secured gateway's REST API is https too.
		srv.TLSConfig = s.cfg.TLS.ConfigALPN("h2", "http/1.1")
		serve = func() error { return srv.ServeTLS(ln, "", "") }
	}
	s.mu.Lock()
	s.rest, s.restAddr = srv, ln.Addr()
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = serve() // ends with Close or Shutdown
	}()
	return nil
}

// stopREST cuts the REST API at once: listener and connections.
func (s *Sim) stopREST() {
	s.mu.Lock()
	srv := s.rest
	s.rest = nil
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// RESTAddr is the REST API's address actually bound, or nil.
func (s *Sim) RESTAddr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restAddr
}

func (s *Sim) stopGateway() {
	s.mu.Lock()
	srv := s.grpc
	s.grpc = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
}

func (s *Sim) timer() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.TimerInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			for _, p := range s.cluster.partitions {
				p.requestCheck()
			}
		case <-s.cluster.stop:
			return
		}
	}
}

// Addr is the gateway address actually bound.
func (s *Sim) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// MetricsAddr is the metrics/admin address actually bound, or nil.
func (s *Sim) MetricsAddr() net.Addr { return s.adminAddr }

// Close stops the simulator: readiness first, then in-flight calls get up
// to the context's time to finish, then everything stops.
func (s *Sim) Close(ctx context.Context) error {
	s.mu.Lock()
	s.ready = false
	srv, rest := s.grpc, s.rest
	s.grpc, s.rest = nil, nil
	s.mu.Unlock()
	select {
	case <-s.cluster.closing:
	default:
		close(s.cluster.closing)
	}
	var restDone chan struct{}
	if rest != nil {
		// Long polls end with closing; other calls get the context's time.
		restDone = make(chan struct{})
		go func() {
			defer close(restDone)
			if rest.Shutdown(ctx) != nil {
				_ = rest.Close()
			}
		}()
	}
	if srv != nil {
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			close(s.cluster.aborted)
			srv.Stop()
			<-done
		}
	}
	if restDone != nil {
		<-restDone
	}
	select {
	case <-s.cluster.stop:
	default:
		close(s.cluster.stop)
	}
	var err error
	if s.admin != nil {
		err = s.admin.Shutdown(ctx)
	}
	s.wg.Wait()
	s.cluster.detached.Wait()
	return err
}

// Pause stalls processing on every partition for d, as a long GC pause
// does; commands keep being accepted and queue up.
func (s *Sim) Pause(d time.Duration) {
	until := time.Now().Add(d)
	for _, p := range s.cluster.partitions {
		p.pausedUntil.Store(until.UnixNano())
	}
	s.cfg.Logger.Info("fault injected: processing paused", "fault", "pause", "for", d.String(), "until", until.UTC())
}

// SlowDown makes every record take factor times as long (factor ≥ 1).
func (s *Sim) SlowDown(factor float64) error {
	if factor < 1 || math.IsNaN(factor) || math.IsInf(factor, 0) {
		return fmt.Errorf("slow-down factor must be 1 or more, got %v", factor)
	}
	for _, p := range s.cluster.partitions {
		p.slowFactor.Store(math.Float64bits(factor))
	}
	s.cfg.Logger.Info("fault injected: records slowed down", "fault", "slow", "factor", factor)
	return nil
}

// Refuse closes the gateway: new connections are refused and open ones
// are cut, as when a cluster's gateway is down.
func (s *Sim) Refuse() {
	s.mu.Lock()
	if s.refusing {
		s.mu.Unlock()
		return
	}
	s.refusing = true
	s.mu.Unlock()
	s.stopGateway()
	s.stopREST()
	s.cfg.Logger.Info("fault injected: the gateway refuses connections", "fault", "refuse", "address", s.Addr().String())
}

// Resume ends every injected fault: processing continues, the slow-down
// ends, and a refused gateway listens again on the same address.
func (s *Sim) Resume() error {
	was := s.faults()
	for _, p := range s.cluster.partitions {
		p.pausedUntil.Store(0)
		p.slowFactor.Store(math.Float64bits(1))
		p.mu.Lock()
		close(p.resumed)
		p.resumed = make(chan struct{})
		p.mu.Unlock()
	}
	s.mu.Lock()
	refusing, addr, restAddr := s.refusing, s.addr, s.restAddr
	s.refusing = false
	s.mu.Unlock()
	if refusing {
		if err := s.listenGateway(addr.String()); err != nil {
			s.cfg.Logger.Error("faults ended, but the gateway cannot listen again", "address", addr.String(), "err", err)
			return err
		}
		if restAddr != nil {
			if err := s.listenREST(restAddr.String()); err != nil {
				s.cfg.Logger.Error("faults ended, but the REST API cannot listen again", "address", restAddr.String(), "err", err)
				return err
			}
		}
	}
	s.cfg.Logger.Info("faults ended", "wasPaused", was.PausedUntil != nil, "wasSlowFactor", was.SlowFactor, "wasRefusing", was.Refusing)
	return nil
}

// Faults is the injected-fault state, as GET /fault reports it.
type Faults struct {
	PausedUntil *time.Time `json:"pausedUntil,omitempty"`
	SlowFactor  float64    `json:"slowFactor"`
	Refusing    bool       `json:"refusing"`
}

func (s *Sim) faults() Faults {
	p := s.cluster.partitions[0]
	f := Faults{SlowFactor: p.slowdown()}
	if u := p.pausedUntil.Load(); u > time.Now().UnixNano() {
		t := time.Unix(0, u).UTC()
		f.PausedUntil = &t
	}
	s.mu.Lock()
	f.Refusing = s.refusing
	s.mu.Unlock()
	return f
}

// QueueLength is the number of records written and not yet processed, per
// partition (index 0 is partition 1).
func (s *Sim) QueueLength() []int {
	out := make([]int, len(s.cluster.partitions))
	for i, p := range s.cluster.partitions {
		out[i] = p.queueLen()
	}
	return out
}

// Incident is an open incident, as GET /incidents lists it (what Operate
// would show of one).
type Incident struct {
	Key                int64  `json:"key"`
	Type               string `json:"type"`
	ProcessInstanceKey int64  `json:"processInstanceKey"`
	ElementInstanceKey int64  `json:"elementInstanceKey"`
	ElementID          string `json:"elementId"`
	JobKey             int64  `json:"jobKey,omitempty"`
	BpmnProcessID      string `json:"bpmnProcessId"`
}

// Incidents lists the open incidents of every partition.
func (s *Sim) Incidents(ctx context.Context) ([]Incident, error) {
	var out []Incident
	for _, p := range s.cluster.partitions {
		got, err := execOn(ctx, p, classInternal, func() ([]Incident, error) {
			var list []Incident
			for _, inc := range p.state.incidents {
				i := Incident{Key: inc.key, Type: inc.kind.String(), ProcessInstanceKey: inc.elem.inst.key,
					ElementInstanceKey: inc.elem.key, ElementID: inc.elem.el.ID, BpmnProcessID: inc.elem.inst.proc.id}
				if inc.job != nil {
					i.JobKey = inc.job.key
				}
				list = append(list, i)
			}
			return list, nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
