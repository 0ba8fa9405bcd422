package proxy

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/camunda/zeebe/clients/go/v8/pkg/pb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
)

// A shard is overloaded past limit × (1 + excess) in flight and stays so
// until it is back below the limit, not at one number: no flapping.
func TestOverloadHysteresis(t *testing.T) {
	p, err := New(Config{Dynamic: true, OverloadLimit: 4, OverloadExcess: 50, Health: HealthConfig{Interval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	s := fakeShard("a", 1, "")
	release := make(chan struct{})
	var wg sync.WaitGroup
	// entered and ended count calls past enter (in their body) and past
	// leave (returned): enter counts a call in flight before it marks the
	// shard overloaded, and leave before it clears the mark, so the count
	// alone does not say the mark is set yet.
	var entered, ended atomic.Int64
	start := func(n int) {
		want, wantEntered := s.inflight.Load()+int64(n), entered.Load()+int64(n)
		for range n {
			wg.Go(func() {
				_, _ = call(context.Background(), p, s, "CreateProcessInstance", func(context.Context, pb.GatewayClient) (int, error) {
					entered.Add(1)
					<-release
					return 0, nil
				})
				ended.Add(1)
			})
		}
		budget.Eventually(t, 5*time.Second, "calls in flight", func() bool { return entered.Load() == wantEntered && s.inflight.Load() == want })
	}
	finish := func(n int) {
		want, wantEnded := s.inflight.Load()-int64(n), ended.Load()+int64(n)
		for range n {
			release <- struct{}{}
		}
		budget.Eventually(t, 5*time.Second, "calls ended", func() bool { return ended.Load() == wantEnded && s.inflight.Load() == want })
	}
	for _, step := range []struct {
		do         func()
		overloaded bool
	}{
		{func() { start(6) }, false},  // 6 = 4 + 50%: not past it
		{func() { start(1) }, true},   // 7
		{func() { finish(2) }, true},  // 5: still over the limit
		{func() { finish(1) }, true},  // 4: at the limit, not below
		{func() { finish(1) }, false}, // 3
		{func() { start(2) }, false},  // 5: under the excess again
	} {
		step.do()
		if got := s.overloaded.Load(); got != step.overloaded {
			t.Fatalf("%d in flight: overloaded %v, want %v", s.inflight.Load(), got, step.overloaded)
		}
	}
	close(release)
	wg.Wait()
}

// --max-inflight-per-shard: past it a call is refused at once with
// RESOURCE_EXHAUSTED naming the limit, never queued; Topology is not
// limited; the calls in flight finish.
func TestInflightLimitRefusesAtOnce(t *testing.T) {
	shards := startShards(t, 1, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: shardConfigs(shards), MaxInflightPerShard: 2})
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
	budget.Eventually(t, 5*time.Second, "two creates in flight", func() bool { return p.shardByID("shard-1").inflight.Load() == 2 })
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
	if p.shardByID("shard-1").cooling(time.Now()) {
		t.Error("the proxy's own limit set the shard cooling off")
	}
}
