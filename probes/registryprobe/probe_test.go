package registryprobe

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
)

func startRegistry(t testing.TB, cfg registry.Config) (*registry.Server, *registryclient.Client) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	s, err := registry.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(budget.Context(t, 10*time.Second)) })
	c, err := registryclient.New("http://"+s.Addr().String()+"/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// Every phase runs and measures against a real registry, and the probe
// leaves nothing registered.
func TestProbeRegistry(t *testing.T) {
	s, c := startRegistry(t, registry.Config{Options: registry.Options{EvictionInterval: 500 * time.Millisecond}})
	var phases []string
	rep, err := Run(budget.Context(t, 2*time.Minute), Config{Registry: c, Instances: 50, Background: 100, Concurrency: []int{2, 8},
		Duration: time.Second, Burst: 300, MixRate: 200, Lease: time.Second, Progress: func(phase string, done float64) {
			if done >= 1 {
				phases = append(phases, phase)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ph := range rep.Phases {
		t.Logf("%-24s c=%-3d ops %-6d %8.0f/s p50 %v p99 %v errors %d %s", ph.Name, ph.Concurrency, ph.Ops, ph.PerSec,
			time.Duration(ph.P50*1e9), time.Duration(ph.P99*1e9), ph.Errors, ph.FirstError)
		names = append(names, ph.Name)
		if ph.Ops == 0 || ph.Errors > 0 || ph.PerSec <= 0 || ph.P99 < ph.P50 {
			t.Errorf("%s: %+v", ph.Name, ph)
		}
		if strings.HasSuffix(ph.Name, "at 200/s") && (ph.PerSec < 150 || ph.PerSec > 210) {
			t.Errorf("%s: %.0f ops/s offered 200/s, want about that", ph.Name, ph.PerSec)
		}
	}
	want := "register (empty),register (empty),register (100 present),mix 70/20/10,mix 70/20/10 at 200/s,full fetch,full fetch gzip,delta fetch"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("phases %s, want %s", got, want)
	}
	for _, ph := range rep.Phases[:3] {
		if ph.Ops != 300 {
			t.Errorf("%s at %d: %d registrations, want the burst of 300", ph.Name, ph.Concurrency, ph.Ops)
		}
	}
	d := rep.Detection
	if d == nil {
		t.Fatal("no failure detection")
	}
	t.Logf("failure detection: lease %.0fs, watch %.2fs, fetch %.2fs", d.Lease, d.Watch, d.Fetch)
	// A lease of 1 s, eviction every 0.5 s: gone within lease + interval + 1 s.
	if limit := budget.Of(2500 * time.Millisecond).Seconds(); d.Watch < d.Lease || d.Fetch < d.Lease || d.Watch > limit || d.Fetch > limit {
		t.Errorf("detected after %.2fs (watch) and %.2fs (fetch): want between the lease %.0fs and %.1fs", d.Watch, d.Fetch, d.Lease, limit)
	}
	if n := len(s.Registry().Instances("")); n != 0 {
		t.Errorf("%d instances left registered after the probe", n)
	}
	if len(phases) == 0 {
		t.Error("no progress reported")
	}
}

// A probe stopped mid-phase still cancels what it registered.
func TestProbeRegistryStopped(t *testing.T) {
	s, c := startRegistry(t, registry.Config{})
	ctx, cancel := context.WithCancel(budget.Context(t, time.Minute))
	stopped := false
	_, err := Run(ctx, Config{Registry: c, Concurrency: []int{4}, Duration: time.Minute, Burst: 1_000_000, Progress: func(string, float64) {
		if !stopped && len(s.Registry().Instances("")) > 100 {
			stopped = true
			cancel()
		}
	}})
	if err == nil {
		t.Fatal("a stopped probe: want its error")
	}
	if n := len(s.Registry().Instances("")); n != 0 {
		t.Errorf("%d instances left registered after a stopped probe", n)
	}
}

// An unreachable registry is one clear error, before any phase.
func TestProbeRegistryUnreachable(t *testing.T) {
	c, err := registryclient.New("http://127.0.0.1:1/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(budget.Context(t, 30*time.Second), Config{Registry: c})
	if err == nil || !strings.Contains(err.Error(), "unreachable") || len(rep.Phases) > 0 {
		t.Errorf("unreachable registry: %v, %d phases", err, len(rep.Phases))
	}
}
