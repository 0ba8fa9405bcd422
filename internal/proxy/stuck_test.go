package proxy

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A shard that takes a deployment and never answers (its processing
// stalled; its Topology still answers) holds nothing else up: the
// deployment returns within the deploy timeout naming it, recorded in
// the ledger; a drain the registry issues meanwhile is applied within a
// second; the other shards' health checks keep their rounds; and once
// the shard answers again the ledger is replayed to it and it takes
// instances of the deployment it missed.
func TestStuckShardDuringADeploy(t *testing.T) {
	sims := simtest.StartN(t, 3, sim.Config{Partitions: 1})
	cfgs := simtest.ShardConfigs(sims)
	const deployTimeout = 2 * time.Second
	// Checks of healthy shards must not time out on a busy machine.
	interval := budget.Capped(100*time.Millisecond, 500*time.Millisecond)
	p := startProxy(t, Config{Dynamic: true, DeployTimeout: deployTimeout, Health: route.HealthConfig{Interval: interval, Timeout: interval}})
	p.Want(cfgs)
	shardsReady(t, p, 3)
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)

	checks := func(id string) float64 {
		return proxyMetric(t, p, "shardctl_proxy_health_checks_total", `shard="`+id+`"`)
	}
	sims[2].Pause(time.Hour)
	before := map[string]float64{"shard-1": checks("shard-1"), "shard-2": checks("shard-2")}
	start := time.Now()
	deployed := make(chan error, 1)
	go func() {
		_, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx)
		deployed <- err
	}()
	time.Sleep(200 * time.Millisecond) // the deployment waits on shard-3
	cfgs[0].State = proxyapi.Draining
	p.Want(cfgs)
	drainAt := time.Now()
	budget.Eventually(t, 5*time.Second, "shard-1 DRAINING", func() bool { return p.ShardByID("shard-1").State() == proxyapi.Draining })
	if took, limit := time.Since(drainAt), budget.Of(time.Second); took > limit {
		t.Errorf("the drain was applied %v after the registry gave it, during a deployment held by a stuck shard: want within %v", took, limit)
	}
	var err error
	select {
	case err = <-deployed:
	case <-time.After(budget.Of(20 * time.Second)):
		t.Fatal("the deployment did not return while shard-3 never answered")
	}
	took := time.Since(start)
	t.Logf("the deployment returned after %v: %v", took.Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), "shard-3") || !strings.Contains(err.Error(), "recorded in the deployment ledger") {
		t.Errorf("the deployment returned %v: want an error naming shard-3, the deployment recorded", err)
	}
	if took > deployTimeout+budget.Of(2*time.Second) {
		t.Errorf("the deployment took %v: want it within the %v deploy timeout", took, deployTimeout)
	}
	// Every round of the others' checks ran meanwhile (a round every
	// interval; a busy machine loses some, the more the busier).
	for id, n := range before {
		if got, want := checks(id)-n, 0.5*float64(took/interval)/budget.Slowdown(); got < want {
			t.Errorf("%s: %.0f health checks in the %v the deployment took: want at least %.0f", id, got, took.Round(time.Millisecond), want)
		}
	}
	if !p.ShardByID("shard-3").NeedsReplay() {
		t.Error("shard-3 does not need a replay after it missed the deployment")
	}

	if err := sims[2].Resume(); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 20*time.Second, "the ledger replayed to shard-3", func() bool { return !p.ShardByID("shard-3").NeedsReplay() })
	on3 := 0
	for range 30 {
		resp, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx)
		if err != nil {
			t.Fatalf("create after shard-3 caught up: %v", err)
		}
		if slot, _ := keyslot.Split(resp.GetProcessInstanceKey()); slot == 3 {
			on3++
		}
	}
	if on3 == 0 {
		t.Error("no instance went to shard-3 once it caught up")
	}
}

// A shard the registry moves to another address under load is taken out
// of placement at once, and its connections close only once the calls in
// flight on it are answered: no create fails.
func TestShardMovedUnderLoad(t *testing.T) {
	sims := simtest.StartN(t, 3, sim.Config{Partitions: 1})
	cfgs := simtest.ShardConfigs(sims)
	p := startProxy(t, Config{Dynamic: true, Health: route.HealthConfig{Interval: -1}})
	p.Want(cfgs[:2])
	shardsReady(t, p, 2)
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	// Slow, so that creates are in flight on it when it moves.
	if err := sims[1].SlowDown(20); err != nil {
		t.Fatal(err)
	}
	loadCtx, stop := context.WithCancel(ctx)
	var created, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				_, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				created.Add(1)
			}
		})
	}
	time.Sleep(time.Second)
	inFlight := p.ShardByID("shard-2")
	moved := cfgs[1]
	moved.Addr = cfgs[2].Addr
	p.Want([]proxyapi.ShardConfig{cfgs[0], moved})
	budget.Eventually(t, 10*time.Second, "shard-2 at its new address", func() bool {
		s := p.ShardByID("shard-2")
		return s != nil && s != inFlight && !s.NeedsReplay()
	})
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	t.Logf("%d created, %d failed across the move", created.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d creates failed when shard-2 moved, first: %v", failed.Load(), firstErr.Load())
	}
}
