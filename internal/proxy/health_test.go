package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A shard that stops answering is DOWN within two check intervals: new
// instances skip it and a call for one of its keys fails at once naming
// it. Restarted on its address (empty, as a simulator restarts), it comes
// back by itself, replayed the ledger before it takes an instance.
func TestHealthChecksMarkDownAndBack(t *testing.T) {
	const interval = 200 * time.Millisecond
	shards := startShards(t, 3, sim.Config{Partitions: 1})
	victim := shards[2]
	p := startProxy(t, Config{Shards: shardConfigs(shards), Health: HealthConfig{Interval: interval, Timeout: 100 * time.Millisecond}})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	// createOn creates instances until one lands on slot; it reports the
	// slots the others landed on.
	createOn := func(slot int) (int64, map[int]int) {
		seen := map[int]int{}
		for range 200 {
			resp, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx)
			if err != nil {
				t.Fatal(err)
			}
			k := resp.GetProcessInstanceKey()
			s, _ := keyslot.Split(k)
			seen[s]++
			if s == slot {
				return k, seen
			}
		}
		return 0, seen
	}
	key, _ := createOn(3)
	if key == 0 {
		t.Fatal("no instance landed on shard-3")
	}
	addr := victim.Addr().String()
	if err := victim.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	state := func(id string) proxyapi.ShardStatus {
		for _, s := range p.Shards() {
			if s.ID == id {
				return s
			}
		}
		t.Fatalf("no shard %s", id)
		return proxyapi.ShardStatus{}
	}
	budget.Eventually(t, 10*time.Second, "shard-3 DOWN", func() bool { return state("shard-3").State == proxyapi.Down })
	t.Logf("DOWN %v after the stop (interval %v)", time.Since(stopped).Round(time.Millisecond), interval)
	if took := time.Since(stopped); took > budget.Of(2*interval+200*time.Millisecond) {
		t.Errorf("DOWN only %v after the stop, want within two intervals of %v", took, interval)
	}
	if st := state("shard-3"); st.AssignedState != proxyapi.Up || st.Health.Up || st.Health.Reason == "" || st.Health.Since == nil {
		t.Errorf("shard-3 in /shards: %+v", st)
	}
	if v := proxyMetric(t, p, "shardctl_proxy_shard_up", `shard="shard-3"`); v != 0 {
		t.Errorf("shardctl_proxy_shard_up of shard-3 = %v", v)
	}

	start := time.Now()
	_, err := c.NewCancelInstanceCommand().ProcessInstanceKey(key).Send(ctx)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shard-3 is DOWN") {
		t.Errorf("a call for a key of the DOWN shard: %v, want UNAVAILABLE naming it", err)
	}
	if took := time.Since(start); took > budget.Of(500*time.Millisecond) {
		t.Errorf("the call for a key of the DOWN shard took %v: it must fail fast", took)
	}
	if _, seen := createOn(-1); seen[3] != 0 {
		t.Errorf("new instances went to the DOWN shard: %v", seen)
	}

	simtest.Start(t, sim.Config{Partitions: 1, Listen: addr})
	budget.Eventually(t, 10*time.Second, "shard-3 back", func() bool { return state("shard-3").State == proxyapi.Up })
	if key, seen := createOn(3); key == 0 {
		t.Errorf("no instance landed on shard-3 after it came back: %v", seen)
	}
}

// Failures on real traffic eject a shard from placement, for longer each
// time; never more than the max ejection percent of the shards at once;
// a success resets the count; a refused connection marks it DOWN at once.
func TestOutlierEjection(t *testing.T) {
	p, err := New(Config{Dynamic: true, Health: HealthConfig{Interval: -1, OutlierFailures: 3, EjectionTime: time.Minute, MaxEjectionPercent: 50}})
	if err != nil {
		t.Fatal(err)
	}
	p.cfg.Health.Interval = time.Hour // on, but no loop runs
	a, b, c, d := fakeShard("a", 1, ""), fakeShard("b", 2, ""), fakeShard("c", 3, ""), fakeShard("d", 4, "")
	p.set.Store(build([]*shard{a, b, c, d}, "", nil))
	unavailable := status.Error(codes.Unavailable, "io exception")
	fail := func(s *shard, n int, err error) {
		for range n {
			p.noteFailure(false, s, err)
		}
	}
	until := func(s *shard) time.Duration {
		return time.Until(time.Unix(0, s.health.ejectedUntil.Load())).Round(time.Minute)
	}

	fail(a, 2, unavailable)
	a.health.consecutive.Store(0) // what a success does (call)
	fail(a, 2, unavailable)
	if a.health.ejected(time.Now()) {
		t.Fatal("ejected after failures a success interrupted")
	}
	fail(a, 1, unavailable)
	if !a.health.ejected(time.Now()) || until(a) != time.Minute {
		t.Fatalf("a: ejected %v for %v after 3 failures in a row, want 1m", a.health.ejected(time.Now()), until(a))
	}
	// The client's own deadline is not the shard's failure.
	for range 5 {
		p.noteFailure(true, b, status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	}
	if b.health.ejected(time.Now()) {
		t.Error("b ejected for its clients' deadlines")
	}
	fail(b, 3, status.Error(codes.DeadlineExceeded, "request timed out in the broker"))
	if !b.health.ejected(time.Now()) {
		t.Error("b not ejected after the shard's own timeouts")
	}
	fail(c, 3, unavailable)
	if c.health.ejected(time.Now()) || testutil.ToFloat64(p.metrics.ejectionsRefused.WithLabelValues("c")) != 1 {
		t.Error("a third of four shards ejected past the 50% limit")
	}
	// Ejected again: twice as long.
	a.health.ejectedUntil.Store(0)
	fail(a, 3, unavailable)
	if until(a) != 2*time.Minute {
		t.Errorf("second ejection of a for %v, want 2m", until(a))
	}
	if picked := p.pick(time.Now(), nil); picked != c && picked != d {
		t.Errorf("picked %v while a and b are ejected", picked.ID)
	}
	refused := status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\"")
	p.noteFailure(false, d, refused)
	if !d.health.down.Load() || d.routingState() != proxyapi.Down {
		t.Error("a refused connection did not mark d DOWN")
	}
	if err := downError(d); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("downError: %v", err)
	}
	if picked := p.pick(time.Now(), nil); picked != c {
		t.Errorf("picked %v, want c, the one shard neither ejected nor DOWN", picked)
	}
	p.set.Store(emptySet) // fake shards have no connection to close
	if err := p.Close(context.Background()); err != nil {
		t.Error(err)
	}
}
