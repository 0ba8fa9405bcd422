package demo

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/probes/signals"
	"github.com/shardctl/shardctl/probes/source"
)

// The drain scenario end to end, fast: shards register, the proxy follows,
// the load flows through it to every shard; after the drain, shard-1 gets
// no new instances while the others carry the load.
func TestDrainScenario(t *testing.T) {
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
	scrape, err := source.NewScrape(d.Targets(), "zeebe", time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	go scrape.Run(ctx)

	budget.Eventually(t, 20*time.Second, "the scenario's drain", func() bool { return len(d.Events()) > 0 })
	if ev := d.Events(); len(ev) != 1 || !strings.Contains(ev[0], "shard-1 set DRAINING") {
		t.Fatalf("scenario events %q", ev)
	}
	s, err := d.Registry().Shard(ctx, registry.DefaultShardsApp, "shard-1")
	if err != nil || s.State != "DRAINING" {
		t.Fatalf("shard-1 in the registry: %+v, %v", s, err)
	}
	// Let the 5 s rate window move wholly past the drain (wall-clock time,
	// the scenario's own, not the machine's), then read the signals.
	time.Sleep(8 * time.Second)
	now := time.Now()
	shards, err := scrape.Fetch(ctx, now, 5*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := signals.Evaluate(shards, now, 5*time.Second, signals.DefaultThresholds())
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
