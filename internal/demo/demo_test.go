package demo

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/source"
)

// The drain scenario end to end, fast: shards register, the proxy follows,
// the load flows through it to every shard; after the drain, shard-1 gets
// no new instances while the others carry the load.
func TestDrainScenario(t *testing.T) {
	t.Parallel()
	ctx := budget.Context(t, 60*time.Second)
	d, err := Start(ctx, Config{Shards: 3, Rate: 60, Scenario: "drain", Listen: "127.0.0.1:0", Step: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(budget.Context(t, 10*time.Second)); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	signalsNow := scraped(t, ctx, d)

	budget.Eventually(t, 20*time.Second, "the scenario's drain", func() bool { return len(d.Events()) > 0 })
	if ev := d.Events(); len(ev) != 1 || !strings.Contains(ev[0], "shard-1 set DRAINING") {
		t.Fatalf("scenario events %q", ev)
	}
	s, err := d.Registry().Shard(ctx, registryapi.DefaultShardsApp, "shard-1")
	if err != nil || s.State != "DRAINING" {
		t.Fatalf("shard-1 in the registry: %+v, %v", s, err)
	}
	// Let the 5 s rate window move wholly past the drain (wall-clock time,
	// the scenario's own, not the machine's), then read the signals.
	time.Sleep(8 * time.Second)
	r := signalsNow()
	for _, sh := range r.Shards {
		switch {
		case sh.Name == "shard-1" && sh.CreatedPerSec > 0.5:
			t.Errorf("shard-1 still gets %.1f instances/s after the drain", sh.CreatedPerSec)
		case sh.Name != "shard-1" && sh.CreatedPerSec < 15:
			t.Errorf("%s gets %.1f instances/s, want about half of 60", sh.Name, sh.CreatedPerSec)
		}
	}
	if st := d.Load(); st.Created == 0 || st.Failed > 0 || st.Refused > 0 {
		t.Errorf("load through the proxy: %+v", st)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{Shards: 0, Scenario: "steady"}, {Shards: 40, Scenario: "steady"}, {Shards: 3, Rate: -1, Scenario: "steady"}, {Shards: 3, Scenario: "party"}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// A busy gateway address: the demo's default takes a free port instead,
// an address the user named is an error.
func TestBusyListenAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		orFree bool
		want   error
	}{{true, nil}, {false, syscall.EADDRINUSE}} {
		ctx := budget.Context(t, time.Minute)
		d, err := Start(ctx, Config{Shards: 1, Rate: 1, Scenario: "steady", Listen: busy.Addr().String(), ListenOrFree: tc.orFree})
		if !errors.Is(err, tc.want) {
			t.Fatalf("ListenOrFree %v: %v, want %v", tc.orFree, err, tc.want)
		}
		if err != nil {
			continue
		}
		if d.GatewayAddr().String() == busy.Addr().String() {
			t.Errorf("the gateway shares %s", busy.Addr())
		}
		if err := d.Close(ctx); err != nil {
			t.Error(err)
		}
	}
}

// The monolith scenario, fast (a user's minute of it on a terminal is in
// the long tier: cmd/shardctl TestDemoMonolithOnATerminal): one cluster
// alone, the load raised by a fifth a step to three times its start, and
// past its knee the cluster completes less than it is given.
func TestMonolithScenario(t *testing.T) {
	t.Parallel()
	ctx := budget.Context(t, 90*time.Second)
	d, err := Start(ctx, Config{Shards: 3, Rate: 50, Scenario: "monolith", Listen: "127.0.0.1:0", Step: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(budget.Context(t, 10*time.Second)); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if n := len(d.Targets()); n != 1 {
		t.Fatalf("the monolith runs %d shards, want one", n)
	}
	signalsNow := scraped(t, ctx, d)

	budget.Eventually(t, 30*time.Second, "the load raised ten times", func() bool { return len(d.Events()) == 10 })
	if ev := d.Events(); !strings.Contains(ev[0], "load raised to 60 instances/s") || !strings.Contains(ev[9], "load raised to 150 instances/s") {
		t.Fatalf("scenario events %q: want 60/s first and 150/s last", ev)
	}
	// Twice the cluster's knee (about 75/s): what it completes falls
	// behind what it is given, at once.
	time.Sleep(6 * time.Second)
	r := signalsNow()
	if len(r.Shards) != 1 {
		t.Fatalf("signals of %d shards", len(r.Shards))
	}
	if sh := r.Shards[0]; sh.Ratio == nil || *sh.Ratio > 0.9 || sh.Debt <= 0 {
		t.Errorf("past the knee the cluster completes %v of what it creates (%.0f/s of %.0f/s), debt %.0f: want under 0.9 and a debt",
			sh.Ratio, sh.CompletedPerSec, sh.CreatedPerSec, sh.Debt)
	}
}

// scraped scrapes the demo's shards every second until ctx ends, and
// gives their signals over the last 5 s when asked.
func scraped(t *testing.T, ctx context.Context, d *Demo) func() signals.Report {
	t.Helper()
	scrape, err := source.NewScrape(d.Targets(), "zeebe", time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	go scrape.Run(ctx)
	return func() signals.Report {
		t.Helper()
		now := time.Now()
		shards, err := scrape.Fetch(ctx, now, 5*time.Second, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return signals.Evaluate(shards, now, 5*time.Second, signals.DefaultThresholds())
	}
}
