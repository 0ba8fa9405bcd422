package proxy

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A shard that stops answering is DOWN within two check intervals: new
// instances skip it and a call for one of its keys fails at once naming
// it. Restarted on its address (empty, as a simulator restarts), it comes
// back by itself, replayed the ledger before it takes an instance.
func TestHealthChecksMarkDownAndBack(t *testing.T) {
	const interval = 200 * time.Millisecond
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 1})
	victim := shards[2]
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Health: route.HealthConfig{Interval: interval, Timeout: 100 * time.Millisecond}})
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
