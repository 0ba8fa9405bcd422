// Package registryprobe measures a registry the way the published Eureka
// evaluation did: bursts of unique registrations at rising concurrency,
// the same with thousands of instances present, a 70/20/10 mix of
// renewals, registrations and cancellations, and full fetches, full and
// delta fetches on their own, and how long a dead instance stays listed.
// It speaks Eureka's REST API like any client, so it measures any
// registry that does, and it cancels everything it registered.
// It links no runtime: it reads the proxy and the registry through their
// api packages (internal/architecture checks).
package registryprobe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
)

// Defaults of a probe.
const (
	DefaultInstances  = 600
	DefaultDuration   = 60 * time.Second
	DefaultBurst      = 20_000
	DefaultBackground = 3000
	DefaultLease      = 3 * time.Second
	DefaultMixRate    = 5000
	// mixConcurrency is the mix's and the size phase's concurrency, the
	// published one.
	mixConcurrency = 50
	// fetchConcurrency is the fetch phases' concurrency.
	fetchConcurrency = 10
	// leaseOfLoad is the lease of the instances the probe loads: longer
	// than any phase, so that none expires under it.
	leaseOfLoad = 15 * time.Minute
)

// DefaultConcurrency is the register phases' concurrencies.
var DefaultConcurrency = []int{10, 20, 50, 100}

// Config is what to probe and how hard.
type Config struct {
	// Registry is the registry to probe; the probe uses its URL and token
	// with connections of its own.
	Registry *registryclient.Client
	// Instances in the mix and the fetch phases; Background more in
	// another app during the size and mix phases.
	Instances, Background int
	// Concurrency of each register phase.
	Concurrency []int
	// Duration bounds each timed phase; a register phase also ends after
	// Burst registrations.
	Duration time.Duration
	Burst    int
	// MixRate is the mix's offered rate in the open-loop mix phase (ops
	// per second).
	MixRate float64
	// Lease of the instance whose death the last phase times.
	Lease time.Duration
	// Progress hears which phase runs and its share done (0-1).
	Progress func(phase string, done float64)
}

// Check fills what is zero with the defaults and refuses what cannot be
// probed.
func (c *Config) Check() error {
	if c.Instances <= 0 {
		c.Instances = DefaultInstances
	}
	if c.Background < 0 {
		return fmt.Errorf("background instances %d: want 0 or more", c.Background)
	}
	if len(c.Concurrency) == 0 {
		c.Concurrency = DefaultConcurrency
	}
	for _, n := range c.Concurrency {
		if n <= 0 || n > 1000 {
			return fmt.Errorf("concurrency %d: want 1-1000", n)
		}
	}
	if c.Duration <= 0 {
		c.Duration = DefaultDuration
	}
	if c.Burst <= 0 {
		c.Burst = DefaultBurst
	}
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.MixRate <= 0 {
		c.MixRate = DefaultMixRate
	}
	if c.Lease%time.Second != 0 {
		return fmt.Errorf("lease %v: Eureka's leases are whole seconds", c.Lease)
	}
	if c.Progress == nil {
		c.Progress = func(string, float64) {}
	}
	return nil
}

// Phase is one measured phase.
type Phase struct {
	Name        string  `json:"phase"`
	Concurrency int     `json:"concurrency"`
	Ops         int     `json:"ops"`
	Errors      int     `json:"errors"`
	Seconds     float64 `json:"seconds"`
	PerSec      float64 `json:"opsPerSec"`
	P50         float64 `json:"p50Seconds"`
	P99         float64 `json:"p99Seconds"`
	// Dropped is, of an open-loop phase's Errors, the offers that found
	// all its workers busy when due and were never sent.
	Dropped int `json:"dropped,omitempty"`
	// FirstError is the first error of the phase, to say what went wrong.
	FirstError string `json:"firstError,omitempty"`
}

// Detection is how long a dead instance stayed listed, from the
// registration its lease started at.
type Detection struct {
	Lease float64 `json:"leaseSeconds"`
	// Watch and Fetch are when the registry's watch said it was gone and
	// when a fresh full fetch no longer listed it.
	Watch float64 `json:"watchSeconds"`
	Fetch float64 `json:"fetchSeconds"`
}

// Report is a probe's result.
type Report struct {
	Registry  string     `json:"registry"`
	Phases    []Phase    `json:"phases"`
	Detection *Detection `json:"failureDetection,omitempty"`
	// Baseline compares each phase with the same phase of an earlier
	// report (another store, another version), when one was given.
	Baseline []Comparison `json:"baseline,omitempty"`
}

// Comparison is a phase beside the same phase (name and concurrency) of a
// baseline report.
type Comparison struct {
	Phase       string  `json:"phase"`
	Concurrency int     `json:"concurrency"`
	Registry    string  `json:"baselineRegistry"`
	PerSec      float64 `json:"baselineOpsPerSec"`
	P99         float64 `json:"baselineP99Seconds"`
	// Ratio is this run's ops/s over the baseline's.
	Ratio float64 `json:"ratio"`
}

// Compare sets r.Baseline from the phases the two reports share.
func (r *Report) Compare(base Report) {
	r.Baseline = nil
	for _, ph := range r.Phases {
		for _, b := range base.Phases {
			if b.Name == ph.Name && b.Concurrency == ph.Concurrency && b.PerSec > 0 {
				r.Baseline = append(r.Baseline, Comparison{Phase: ph.Name, Concurrency: ph.Concurrency, Registry: base.Registry,
					PerSec: b.PerSec, P99: b.P99, Ratio: ph.PerSec / b.PerSec})
			}
		}
	}
}

// Compared is the baseline of a phase, if the report has one.
func (r *Report) Compared(ph Phase) (Comparison, bool) {
	for _, c := range r.Baseline {
		if c.Phase == ph.Name && c.Concurrency == ph.Concurrency {
			return c, true
		}
	}
	return Comparison{}, false
}

// Apps the probe registers in; ids carry the run's id, so two probes at
// once do not meet.
const (
	appLoad       = "SHARDCTL-PROBE"
	appBackground = "SHARDCTL-PROBE-BACKGROUND"
	appLease      = "SHARDCTL-PROBE-LEASE"
)

type prober struct {
	cfg  Config
	c    *registryclient.Client
	http *http.Client
	run  string // this run's id

	bursts int // register phases run, for unique ids

	mu         sync.Mutex
	registered map[registryapi.InstanceRef]bool // to cancel at the end
}

// Run runs every phase in order and cleans up; on ctx's end it stops,
// cleans up, and returns what it measured with ctx's error.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	if err := cfg.Check(); err != nil {
		return Report{}, err
	}
	if cfg.Registry == nil {
		return Report{}, errors.New("no registry to probe")
	}
	rep = Report{Registry: cfg.Registry.Base.String()}
	p, err := newProber(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer p.close()
	defer func() {
		p.cleanupApp("")
		if n := p.left(); n > 0 && err == nil {
			err = fmt.Errorf("%d instances the probe registered could not be cancelled: their leases (%v) end them", n, leaseOfLoad)
		}
	}()

	for _, conc := range cfg.Concurrency {
		ph := p.registerBurst(ctx, "register (empty)", conc)
		rep.Phases = append(rep.Phases, ph)
		p.cleanupApp(appLoad)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	steps := []struct {
		name string
		run  func(context.Context) (Phase, error)
	}{
		{"load the background", func(ctx context.Context) (Phase, error) {
			return p.load(ctx, appBackground, cfg.Background)
		}},
		{fmt.Sprintf("register (%d present)", cfg.Background), func(ctx context.Context) (Phase, error) {
			ph := p.registerBurst(ctx, fmt.Sprintf("register (%d present)", cfg.Background), mixConcurrency)
			p.cleanupApp(appLoad)
			return ph, nil
		}},
		{"load the mix", func(ctx context.Context) (Phase, error) { return p.load(ctx, appLoad, cfg.Instances) }},
		{"mix 70/20/10", p.mix},
		{"mix 70/20/10 at a rate", p.mixAt},
		// The fetch phases read --instances alone, the published 600.
		{"unload the background", func(context.Context) (Phase, error) { p.cleanupApp(appBackground); return Phase{}, nil }},
		{"full fetch", func(ctx context.Context) (Phase, error) { return p.fetches(ctx, "full fetch", "/apps", false), nil }},
		{"full fetch gzip", func(ctx context.Context) (Phase, error) { return p.fetches(ctx, "full fetch gzip", "/apps", true), nil }},
		{"delta fetch", func(ctx context.Context) (Phase, error) {
			return p.fetches(ctx, "delta fetch", "/apps/delta", true), nil
		}},
	}
	for _, s := range steps {
		ph, err := s.run(ctx)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", s.name, err)
		}
		if ph.Name != "" {
			rep.Phases = append(rep.Phases, ph)
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	// Fetches measured, the rest goes before the lease phase, so that
	// the fetch it polls is the registry's ordinary size.
	p.cleanupApp(appLoad)
	d, err := p.detect(ctx)
	if err != nil {
		return rep, fmt.Errorf("failure detection: %w", err)
	}
	rep.Detection = &d
	return rep, nil
}

// newProber reaches the registry once before loading it: a wrong URL is
// one clear error, not a phase of failures. cfg is checked.
func newProber(ctx context.Context, cfg Config) (*prober, error) {
	c := &registryclient.Client{Base: cfg.Registry.Base, Token: cfg.Registry.Token}
	maxConc := slices.Max(append(slices.Clone(cfg.Concurrency), mixConcurrency))
	// One kept-alive connection per worker: the default of two per host
	// would measure connection setup.
	tr := &http.Transport{MaxIdleConns: maxConc * 2, MaxIdleConnsPerHost: maxConc * 2, DisableCompression: true, IdleConnTimeout: time.Minute}
	c.HTTP = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var id [4]byte
	_, _ = rand.Read(id[:])
	p := &prober{cfg: cfg, c: c, http: c.HTTP, run: hex.EncodeToString(id[:]), registered: map[registryapi.InstanceRef]bool{}}
	if _, err := c.Status(ctx); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *prober) close() { p.http.Transport.(*http.Transport).CloseIdleConnections() }

func (p *prober) instance(app, id string, lease time.Duration) *registryapi.Instance {
	return &registryapi.Instance{
		InstanceID: id, App: app, HostName: id + ".probe.invalid", IPAddr: "192.0.2.1", Port: 8080, PortEnabled: true,
		VIPAddress: app, Status: registryapi.StatusUp, DataCenterInfo: registryapi.DataCenterInfo{Name: "MyOwn"},
		LeaseInfo: registryapi.LeaseInfo{RenewalIntervalInSecs: max(int(lease/time.Second)/3, 1), DurationInSecs: int(lease / time.Second)},
	}
}

// register registers an instance, noted for the cleanup before it is
// sent: a registration cut short by the end of a phase may have arrived.
func (p *prober) register(ctx context.Context, in *registryapi.Instance) error {
	ref := registryapi.InstanceRef{App: in.App, ID: in.InstanceID}
	p.mu.Lock()
	p.registered[ref] = true
	p.mu.Unlock()
	err := p.c.Register(ctx, in)
	var he *registryclient.HTTPError
	if errors.As(err, &he) {
		// Answered, and refused: nothing to cancel.
		p.mu.Lock()
		delete(p.registered, ref)
		p.mu.Unlock()
	}
	return err
}

func (p *prober) cancel(ctx context.Context, ref registryapi.InstanceRef) error {
	err := p.c.Cancel(ctx, ref.App, ref.ID)
	if err == nil || registryclient.IsNotFound(err) {
		p.mu.Lock()
		delete(p.registered, ref)
		p.mu.Unlock()
	}
	return err
}

// timed runs op from conc workers, i = 0, 1, … until n ops (n ≤ 0: no
// bound) or the duration, and measures each op.
func (p *prober) timed(ctx context.Context, name string, conc, n int, op func(ctx context.Context, worker, i int) error) Phase {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Duration)
	defer cancel()
	var next atomic.Int64
	rec := newRecorder(conc)
	start := time.Now()
	stopProgress := p.progress(name, start, n, &next)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if n > 0 && i >= n {
					return
				}
				t := time.Now()
				err := op(ctx, w, i)
				if ctx.Err() != nil {
					return // cut by the phase's end: not measured
				}
				rec.note(w, time.Since(t), err)
			}
		})
	}
	wg.Wait()
	stopProgress()
	return rec.phase(name, conc, time.Since(start))
}

// paced offers op at rate per second, whatever the answers take (open
// loop: a slow registry meets the same offer), from at most conc at once;
// an op's latency counts from when it was due, so that time spent
// waiting for a free worker is not hidden. An offer with no free worker
// is an error.
func (p *prober) paced(ctx context.Context, name string, rate float64, conc int, op func(ctx context.Context, worker, i int) error) Phase {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Duration)
	defer cancel()
	free := make(chan int, conc)
	for w := range conc {
		free <- w
	}
	rec := newRecorder(conc)
	var offered atomic.Int64
	var unserved int // offers that found no free worker
	start := time.Now()
	stopProgress := p.progress(name, start, 0, &offered)
	var wg sync.WaitGroup
	for i := 0; ; i++ {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		offered.Add(1)
		select {
		case w := <-free:
			wg.Go(func() {
				defer func() { free <- w }()
				err := op(ctx, w, i)
				if ctx.Err() != nil {
					return
				}
				rec.note(w, time.Since(due), err)
			})
		default:
			unserved++
			rec.firstErr.CompareAndSwap(nil, fmt.Sprintf("%d requests in flight: the registry fell behind the offered %.0f/s", conc, rate))
		}
	}
	wg.Wait()
	stopProgress()
	ph := rec.phase(name, conc, time.Since(start))
	ph.Errors += unserved
	ph.Dropped = unserved
	return ph
}

// recorder keeps a phase's latencies and errors, a slot per worker so
// that workers never share one.
type recorder struct {
	lat      [][]time.Duration
	errs     []int
	firstErr atomic.Value // string
}

func newRecorder(workers int) *recorder {
	return &recorder{lat: make([][]time.Duration, workers), errs: make([]int, workers)}
}

// note records one op of worker w.
func (r *recorder) note(w int, took time.Duration, err error) {
	r.lat[w] = append(r.lat[w], took)
	if err != nil {
		r.errs[w]++
		r.firstErr.CompareAndSwap(nil, err.Error())
	}
}

// phase sums up what the workers recorded.
func (r *recorder) phase(name string, conc int, took time.Duration) Phase {
	all := slices.Concat(r.lat...)
	slices.Sort(all)
	ph := Phase{Name: name, Concurrency: conc, Ops: len(all), Seconds: took.Seconds()}
	for _, e := range r.errs {
		ph.Errors += e
	}
	if s, ok := r.firstErr.Load().(string); ok {
		ph.FirstError = s
	}
	if len(all) > 0 {
		ph.PerSec = float64(len(all)) / took.Seconds()
		ph.P50, ph.P99 = quantile(all, 0.50).Seconds(), quantile(all, 0.99).Seconds()
	}
	return ph
}

// progress reports a phase's share done every 200 ms until stopped: by
// count when it has a bound, else by time.
func (p *prober) progress(name string, start time.Time, n int, done *atomic.Int64) func() {
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			share := time.Since(start).Seconds() / p.cfg.Duration.Seconds()
			if n > 0 {
				share = max(share, float64(done.Load())/float64(n))
			}
			p.cfg.Progress(name, min(share, 1))
			select {
			case <-stop:
				p.cfg.Progress(name, 1)
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(stop); <-finished }
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// registerBurst registers unique instances from conc workers, Burst of
// them or for the duration.
func (p *prober) registerBurst(ctx context.Context, name string, conc int) Phase {
	p.bursts++
	burst := p.bursts
	return p.timed(ctx, name, conc, p.cfg.Burst, func(ctx context.Context, _, i int) error {
		return p.register(ctx, p.instance(appLoad, fmt.Sprintf("%s-burst%d-%d", p.run, burst, i), leaseOfLoad))
	})
}

// load registers n instances in app, untimed; it fails on the first
// error, which would spoil the phases after it.
func (p *prober) load(ctx context.Context, app string, n int) (Phase, error) {
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range mixConcurrency {
		wg.Go(func() {
			for ctx.Err() == nil && firstErr.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := p.register(ctx, p.instance(app, fmt.Sprintf("%s-%d", p.run, i), leaseOfLoad)); err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return Phase{}, err
	}
	return Phase{}, nil
}

// mix is the published mix over the loaded instances: 70% renewals, 20%
// registrations and cancellations (half each, so the size stays), 10%
// full fetches, gzipped as Eureka clients ask for them.
func (p *prober) mix(ctx context.Context) (Phase, error) {
	return p.timed(ctx, "mix 70/20/10", mixConcurrency, 0, p.mixOp(mixConcurrency)), nil
}

// mixAt offers the mix at MixRate, open loop: the latency a registry
// gives at that load, where the closed loop gives its most.
func (p *prober) mixAt(ctx context.Context) (Phase, error) {
	const inFlight = 4 * mixConcurrency
	return p.paced(ctx, fmt.Sprintf("mix 70/20/10 at %.0f/s", p.cfg.MixRate), p.cfg.MixRate, inFlight, p.mixOp(inFlight)), nil
}

// mixOp is one operation of the mix, for workers 0 to workers-1.
func (p *prober) mixOp(workers int) func(ctx context.Context, w, _ int) error {
	own := make([][]string, workers) // instances each worker registered and not cancelled yet
	var seq atomic.Int64
	return func(ctx context.Context, w, _ int) error {
		switch r := mrand.Float64(); {
		case r < 0.7:
			return p.c.Renew(ctx, appLoad, fmt.Sprintf("%s-%d", p.run, mrand.IntN(p.cfg.Instances)))
		case r < 0.8 || (r < 0.9 && len(own[w]) == 0):
			id := fmt.Sprintf("%s-mix-%d", p.run, seq.Add(1))
			if err := p.register(ctx, p.instance(appLoad, id, leaseOfLoad)); err != nil {
				return err
			}
			own[w] = append(own[w], id)
			return nil
		case r < 0.9:
			id := own[w][len(own[w])-1]
			own[w] = own[w][:len(own[w])-1]
			return p.cancel(ctx, registryapi.InstanceRef{App: appLoad, ID: id})
		default:
			return p.fetch(ctx, "/apps", true)
		}
	}
}

// fetches times full or delta fetches.
func (p *prober) fetches(ctx context.Context, name, path string, gzip bool) Phase {
	return p.timed(ctx, name, fetchConcurrency, 0, func(ctx context.Context, _, _ int) error { return p.fetch(ctx, path, gzip) })
}

// fetch reads a fetch's whole body, as a client would.
func (p *prober) fetch(ctx context.Context, path string, gzip bool) error {
	body, err := p.get(ctx, path, gzip)
	if err == nil {
		_, err = io.Copy(io.Discard, body)
		body.Close()
	}
	return err
}

func (p *prober) get(ctx context.Context, path string, gzip bool) (io.ReadCloser, error) {
	u := *p.c.Base
	u.Path += path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if gzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: HTTP %d", u.Redacted(), resp.StatusCode)
	}
	return resp.Body, nil
}

// detect registers an instance with a short lease and never renews it,
// then times until the registry's watch says it is gone and until a full
// fetch no longer lists it.
func (p *prober) detect(ctx context.Context) (Detection, error) {
	d := Detection{Lease: p.cfg.Lease.Seconds()}
	name := "failure detection"
	limit := p.cfg.Lease + 5*time.Minute
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	id := p.run + "-lease"
	seen, gone := make(chan struct{}), make(chan time.Time, 1)
	var sawIt bool
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		p.c.Watch(ctx, appLease, registryclient.Watcher{Shards: func(_ uint64, shards []registryapi.Shard) {
			there := slices.ContainsFunc(shards, func(s registryapi.Shard) bool { return s.ID == id })
			switch {
			case there && !sawIt:
				sawIt = true
				close(seen)
			case !there && sawIt:
				select {
				case gone <- time.Now():
				default:
				}
			}
		}})
	}()
	defer func() { cancel(); <-watchDone }()
	start := time.Now()
	if err := p.register(ctx, p.instance(appLease, id, p.cfg.Lease)); err != nil {
		return d, err
	}
	select {
	case <-seen:
	case <-ctx.Done():
		return d, fmt.Errorf("the watch never showed the instance registered: %w", ctx.Err())
	}
	var watchAt, fetchAt time.Time
	// Once the lease is long past, whether self-preservation holds it.
	checkAt := start.Add(p.cfg.Lease + 5*time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for watchAt.IsZero() || fetchAt.IsZero() {
		p.cfg.Progress(name, min(time.Since(start).Seconds()/(p.cfg.Lease.Seconds()+2), 1))
		select {
		case <-ctx.Done():
			return d, fmt.Errorf("still listed %v after a lease of %v: %w", time.Since(start).Round(time.Second), p.cfg.Lease, ctx.Err())
		case at := <-gone:
			watchAt = at
		case <-tick.C:
			if now := time.Now(); now.After(checkAt) {
				checkAt = now.Add(time.Second)
				if held := p.evictionHeld(ctx); held != nil {
					return d, held
				}
			}
			if fetchAt.IsZero() {
				listed, err := p.listed(ctx, id)
				if err != nil {
					return d, err
				}
				if !listed {
					fetchAt = time.Now()
				}
			}
		}
	}
	p.cfg.Progress(name, 1)
	p.mu.Lock()
	delete(p.registered, registryapi.InstanceRef{App: appLease, ID: id})
	p.mu.Unlock()
	d.Watch, d.Fetch = watchAt.Sub(start).Seconds(), fetchAt.Sub(start).Seconds()
	return d, nil
}

// evictionHeld is an error once the lease is long past while the
// registry's self-preservation holds eviction: the instance would stay
// listed for as long as it lasts, and the probe would time nothing.
func (p *prober) evictionHeld(ctx context.Context) error {
	h, err := p.c.Status(ctx)
	if err != nil || !h.SelfPreserving {
		return nil
	}
	return fmt.Errorf("the registry holds eviction (self-preservation: %.0f renewals in the last minute, below its threshold of %.0f), so no lease expires: run it with self-preservation off (registry serve --self-preservation=false) to time failure detection",
		h.RenewalsLastMinute, h.RenewalThreshold)
}

// listed says whether a fresh full fetch lists the lease instance.
func (p *prober) listed(ctx context.Context, id string) (bool, error) {
	body, err := p.get(ctx, "/apps", false)
	if err != nil {
		return false, err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return false, err
	}
	return bytes.Contains(b, []byte(`"instanceId":"`+id+`"`)), nil
}

// cleanupApp cancels what the probe registered in app.
func (p *prober) cleanupApp(app string) {
	p.mu.Lock()
	var refs []registryapi.InstanceRef
	for ref := range p.registered {
		if app == "" || ref.App == app {
			refs = append(refs, ref)
		}
	}
	p.mu.Unlock()
	// Its own time: a stopped probe still cleans up.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range mixConcurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(refs) {
					return
				}
				_ = p.cancel(ctx, refs[i])
			}
		})
	}
	wg.Wait()
}

// Left reports how many registrations the probe could not cancel.
func (p *prober) left() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.registered)
}
