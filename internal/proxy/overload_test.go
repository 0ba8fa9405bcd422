package proxy

import (
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// --max-inflight-per-shard: past it a call is refused at once with
// RESOURCE_EXHAUSTED naming the limit, never queued; Topology is not
// limited; the calls in flight finish.
func TestInflightLimitRefusesAtOnce(t *testing.T) {
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), MaxInflightPerShard: 2})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	shards[0].Pause(budget.Of(time.Second))
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			_, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx)
			errs <- err
		})
	}
	budget.Eventually(t, 5*time.Second, "two creates in flight", func() bool { return shardStatus(p, "shard-1").InFlight == 2 })
	start := time.Now()
	_, err := c.NewCancelInstanceCommand().ProcessInstanceKey(keyslot.With(1<<51|5, 1)).Send(ctx)
	took := time.Since(start)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-inflight-per-shard") {
		t.Errorf("a call past the limit: %v, want RESOURCE_EXHAUSTED naming the limit", err)
	}
	if took > budget.Of(500*time.Millisecond) {
		t.Errorf("refused after %v: it waited", took)
	}
	if _, err := c.NewTopologyCommand().Send(ctx); err != nil {
		t.Errorf("Topology at the limit: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a create in flight at the limit: %v", err)
		}
	}
	if shardStatus(p, "shard-1").CoolingOff {
		t.Error("the proxy's own limit set the shard cooling off")
	}
}
