// Package demo runs a whole federation in one process, for the quick
// start, rehearsals and talks: a registry, simulated shards that register
// and heartbeat, the proxy following the registry, a load through the
// proxy, and a scenario that changes something while it runs.
// It embeds the runtimes and a load generator; it never imports probes/,
// commands/, tui/ or migrate/.
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/source"
)

// Scenarios by name, with what they show.
var Scenarios = map[string]string{
	"steady":   "every shard healthy under a constant load",
	"knee":     "shard 1 is a small cluster that degrades past its knee, and the load grows to three times its start: the proxy gives shard 1 less as it slows, so it holds near its knee while the others take the rest",
	"monolith": "one cluster alone that degrades past its knee, and the load grows to three times its start (the proxy in front admits everything, as nothing stood before the monolith of the public load test): the scissors open, the queue grows and the latency moves to seconds, critical within a minute of the knee",
	"drain":    "after 30 s shard 1 is drained in the registry: the proxy stops placing instances there while its jobs complete",
}

// Config of a demo.
type Config struct {
	Shards   int
	Rate     float64 // instances per second offered through the proxy
	Scenario string
	// Listen is the proxy's gateway address (zbctl and clients point here).
	Listen string
	// ListenOrFree takes a free port when Listen is in use: the demo's
	// default address must not stop a first run on a busy machine.
	ListenOrFree bool
	Logger       *slog.Logger
	// Step is the scenario's pace: drain waits 3 steps, knee raises the
	// load every step (default 10 s).
	Step time.Duration
}

// Demo is a running federation.
type Demo struct {
	cfg      Config
	registry *registry.Server
	sims     []*sim.Sim
	ids      []string
	proxy    *proxy.Proxy
	client   zbc.Client
	load     *load.Generator
	regc     *registryclient.Client

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	events []string
}

// Validate checks a configuration.
func (c Config) Validate() error {
	if c.Shards < 1 || c.Shards > 31 {
		return fmt.Errorf("--shards %d: want 1 to 31", c.Shards)
	}
	if c.Rate < 0 {
		return fmt.Errorf("--rate %v: want 0 or more instances per second", c.Rate)
	}
	if _, ok := Scenarios[c.Scenario]; !ok {
		return fmt.Errorf("--scenario %q: want one of %s", c.Scenario, strings.Join(ScenarioNames(), ", "))
	}
	return nil
}

// ScenarioNames lists the scenarios, sorted.
func ScenarioNames() []string {
	var out []string
	for k := range Scenarios {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Start brings everything up and starts the load and the scenario.
func Start(ctx context.Context, cfg Config) (_ *Demo, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Step <= 0 {
		cfg.Step = 10 * time.Second
	}
	d := &Demo{cfg: cfg}
	defer func() {
		if err != nil {
			_ = d.Close(context.Background())
		}
	}()
	d.registry, err = registry.New(registry.Config{Listen: "127.0.0.1:0", Store: "memory",
		Options: registry.Options{EvictionInterval: time.Second, SelfPreservation: false}})
	if err != nil {
		return nil, err
	}
	if err := d.registry.Start(ctx); err != nil {
		return nil, err
	}
	d.regc, err = registryclient.New(d.RegistryURL(), "")
	if err != nil {
		return nil, err
	}
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancel = cancel
	if cfg.Scenario == "monolith" {
		cfg.Shards = 1
		d.cfg.Shards = 1
	}
	for i := range cfg.Shards {
		sc := sim.Config{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Partitions: 2, Capacity: 500}
		if (cfg.Scenario == "knee" || cfg.Scenario == "monolith") && i == 0 {
			// One partition at 100 records/s takes ~25 one-task
			// instances/s before its knee; the monolith, at 300, ~75/s: past
			// it halfway through the ramp from the default 50/s.
			capacity := 100.0
			if cfg.Scenario == "monolith" {
				capacity = 300
			}
			sc = sim.Config{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", Partitions: 1, Capacity: capacity,
				Degrade: true, DegradeThreshold: 50, BacklogLimit: -1}
			if cfg.Scenario == "monolith" {
				// Zeebe's own backpressure, as the monolith had: it
				// refuses commands past a backlog and degrades all the same.
				sc.BacklogLimit = 0
			}
		}
		s, err := sim.New(sc)
		if err != nil {
			return nil, err
		}
		if err := s.Start(ctx); err != nil {
			return nil, err
		}
		d.sims = append(d.sims, s)
		id := fmt.Sprintf("shard-%d", i+1)
		d.ids = append(d.ids, id)
		in, err := registryapi.NewShardInstance(registryapi.ShardRegistration{
			App: registryapi.DefaultShardsApp, ID: id, Address: s.Addr().String(), Pool: "blue", Slot: i + 1,
			Metrics: "http://" + s.MetricsAddr().String() + "/metrics", RenewalInterval: time.Second, LeaseDuration: 5 * time.Second,
		})
		if err != nil {
			return nil, err
		}
		if err := d.regc.Register(ctx, in); err != nil {
			return nil, err
		}
		d.wg.Add(1)
		go func() { defer d.wg.Done(); d.regc.Heartbeat(run, in, nil) }()
	}

	listen := cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	d.proxy, err = d.startProxy(ctx, listen)
	if errors.Is(err, syscall.EADDRINUSE) && cfg.ListenOrFree {
		d.proxy, err = d.startProxy(ctx, "127.0.0.1:0")
	}
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(d.proxy.Shards()) < cfg.Shards {
		if time.Now().After(deadline) {
			return nil, errors.New("the proxy did not follow every shard of the registry within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	d.client, err = zbc.NewClient(&zbc.ClientConfig{GatewayAddress: d.proxy.Addr().String(), UsePlaintextConnection: true})
	if err != nil {
		return nil, err
	}
	d.load = load.New(load.GRPC(d.client), load.Config{ProcessID: "demo-order", JobType: "demo-work", Rate: cfg.Rate})
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	if err := d.load.Deploy(dctx); err != nil {
		return nil, fmt.Errorf("deploy the demo process through the proxy: %w", err)
	}
	d.wg.Add(2)
	go func() { defer d.wg.Done(); d.load.Run(run) }()
	go func() { defer d.wg.Done(); d.scenario(run) }()
	return d, nil
}

// scenario changes the federation while the demo runs.
func (d *Demo) scenario(ctx context.Context) {
	wait := func(t time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(t):
			return true
		}
	}
	switch d.cfg.Scenario {
	case "knee", "monolith":
		// Grow the load every 10 s up to three times its start: by a tenth
		// in the knee, where the proxy's answer is the story; by a fifth
		// in the monolith, which passes its knee about 30 s in and is
		// critical within a minute of it, as the advisor promises.
		growth, steps := 0.1, 20
		if d.cfg.Scenario == "monolith" {
			growth, steps = 0.2, 10
		}
		for step := 1; step <= steps && wait(d.cfg.Step); step++ {
			r := d.cfg.Rate * (1 + growth*float64(step))
			d.load.SetRate(r)
			d.note("load raised to %.0f instances/s", r)
		}
	case "drain":
		if !wait(3 * d.cfg.Step) {
			return
		}
		if _, err := d.regc.SetState(ctx, registryapi.DefaultShardsApp, d.ids[0], registryapi.StateDraining); err != nil {
			d.note("drain %s: %v", d.ids[0], err)
			return
		}
		d.note("%s set DRAINING in the registry", d.ids[0])
	}
}

func (d *Demo) note(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	d.mu.Lock()
	d.events = append(d.events, time.Now().Format("15:04:05")+" "+msg)
	d.mu.Unlock()
	d.cfg.Logger.Info(msg)
}

// Events are what the scenario did so far.
func (d *Demo) Events() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.events...)
}

func (d *Demo) startProxy(ctx context.Context, listen string) (*proxy.Proxy, error) {
	cfg := proxy.Config{Listen: listen, AdminListen: "127.0.0.1:0", Registry: d.regc,
		Ledger: registryclient.Ledger{C: d.regc}, MaxInflightPerShard: route.DefaultMaxInflightPerShard, CoolingOff: 5 * time.Second}
	if d.cfg.Scenario == "monolith" {
		// No proxy stood before the monolith of the public load test: this
		// one lets every instance through, so the cluster meets the whole
		// load past its knee, as it did there.
		cfg.MaxBacklog, cfg.InstanceLimit, cfg.OverloadLimit = -1, route.InstanceLimitOff, -1
	}
	p, err := proxy.New(cfg)
	if err != nil {
		return nil, err
	}
	return p, p.Start(ctx)
}

// GatewayAddr is the proxy: point zbctl or any Zeebe client here.
func (d *Demo) GatewayAddr() net.Addr { return d.proxy.Addr() }

// AdminAddr is the proxy's /metrics and /shards.
func (d *Demo) AdminAddr() net.Addr { return d.proxy.AdminAddr() }

// RegistryURL is the registry's Eureka base URL.
func (d *Demo) RegistryURL() string { return "http://" + d.registry.Addr().String() + "/eureka" }

// Targets are the shards' /metrics, named by shard id, for probes.
func (d *Demo) Targets() []source.Target {
	var out []source.Target
	for i, s := range d.sims {
		out = append(out, source.Target{Name: d.ids[i], URL: "http://" + s.MetricsAddr().String() + "/metrics"})
	}
	return out
}

// Registry is a client of the demo's registry.
func (d *Demo) Registry() *registryclient.Client { return d.regc }

// Load is the demo's load, for its counts.
func (d *Demo) Load() load.Stats { return d.load.Stats() }

// Close stops the load, the scenario, the proxy, the shards and the
// registry, in that order.
func (d *Demo) Close(ctx context.Context) error {
	if d.cancel != nil {
		d.cancel()
	}
	d.wg.Wait()
	var errs []error
	if d.client != nil {
		errs = append(errs, d.client.Close())
	}
	if d.proxy != nil {
		errs = append(errs, d.proxy.Close(ctx))
	}
	for _, s := range d.sims {
		errs = append(errs, s.Close(ctx))
	}
	if d.registry != nil {
		errs = append(errs, d.registry.Close(ctx))
	}
	return errors.Join(errs...)
}
