package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// It holds for the oldest and the newest Zeebe the simulator plays.
func TestTwoThousandInstancesThroughTheProxy(t *testing.T) {
	simtest.EachEnd(t, twoThousandInstancesThroughTheProxy)
}

func twoThousandInstancesThroughTheProxy(t *testing.T, v sim.Version) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 3, Version: v})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards)})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, 2*time.Minute)

	dep, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "reserve", "charge", "ship"), "order.bpmn").Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slot, _ := keyslot.Split(dep.Key); slot != 1 {
		t.Errorf("deployment key %d carries slot %d, want the lowest slot 1", dep.Key, slot)
	}

	var delivered sync.Map // job key -> true
	var duplicates, completeErrors atomic.Int64
	for _, typ := range []string{"reserve", "charge", "ship"} {
		simtest.Worker(t, c, c.NewJobWorker().JobType(typ).Handler(func(jc worker.JobClient, job entities.Job) {
			if _, seen := delivered.LoadOrStore(job.Key, true); seen {
				duplicates.Add(1)
			}
			if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(context.Background()); err != nil {
				completeErrors.Add(1)
			}
		}).MaxJobsActive(128).Concurrency(8).PollInterval(10*time.Millisecond).RequestTimeout(time.Second).BackoffSupplier(load.Backoff()))
	}

	const n = 2000
	keys := make(chan int64, n)
	createConcurrently(t, ctx, c, "order", n, 64, nil, func(k int64) { keys <- k })
	close(keys)
	perSlot := map[int]int{}
	seen := map[int64]bool{}
	for k := range keys {
		if seen[k] {
			t.Fatalf("instance key %d returned twice", k)
		}
		seen[k] = true
		slot, _ := keyslot.Split(k)
		perSlot[slot]++
	}
	if len(seen) != n {
		t.Fatalf("%d instances created, want %d", len(seen), n)
	}
	t.Logf("instances per slot: %v", perSlot)
	for slot := 1; slot <= 3; slot++ {
		share := float64(perSlot[slot]) / n
		if share < 0.25 || share > 0.41 {
			t.Errorf("slot %d got %.1f%% of the instances, want 33%% ± 8%% (all: %v)", slot, 100*share, perSlot)
		}
	}
	completed := func() float64 {
		var sum float64
		for _, s := range shards {
			sum += simMetric(t, s, "zeebe_executed_instances_total", `action="completed"`)
		}
		return sum
	}
	budget.Eventually(t, 90*time.Second, "every instance to complete", func() bool { return completed() == n })
	time.Sleep(200 * time.Millisecond) // nothing completes twice
	if got := completed(); got != n {
		t.Errorf("%v instances completed, want exactly %d", got, n)
	}
	if d := duplicates.Load(); d != 0 {
		t.Errorf("%d jobs delivered twice", d)
	}
	if e := completeErrors.Load(); e != 0 {
		t.Errorf("%d job completions failed", e)
	}
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"shardctl_proxy_p2c_choices_total", nil, n},
		{"shardctl_proxy_requests_total", []string{`rpc="CreateProcessInstance"`, `code="OK"`}, n},
		{"shardctl_proxy_request_duration_seconds_count", []string{`rpc="CreateProcessInstance"`}, n},
		{"shardctl_proxy_shard_requests_total", []string{`rpc="CreateProcessInstance"`}, n},
		{"shardctl_proxy_ledger_deployments", nil, 1},
		{"shardctl_proxy_shard_inflight_requests", []string{`shard="shard-1"`}, 0},
	} {
		if got := proxyMetric(t, p, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	var jobs int
	delivered.Range(func(any, any) bool { jobs++; return true })
	if jobs != 3*n {
		t.Errorf("%d distinct jobs delivered, want %d", jobs, 3*n)
	}
}

// Power-of-two-choices sends fewer new instances to a slower shard.
func TestPowerOfTwoChoicesFavoursTheFasterShard(t *testing.T) {
	slow := simtest.StartN(t, 1, sim.Config{Partitions: 1, Capacity: 300, BacklogLimit: -1})
	fast := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(append(slow, fast...))})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("p", "x"), "p.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	var onSlow atomic.Int64
	createConcurrently(t, ctx, c, "p", n, 32, nil, func(k int64) {
		if slot, _ := keyslot.Split(k); slot == 1 {
			onSlow.Add(1)
		}
	})
	if share := float64(onSlow.Load()) / n; share > 0.3 {
		t.Errorf("the slow shard got %.0f%% of the instances; power-of-two-choices should send most to the fast one", 100*share)
	}
	t.Logf("slow shard: %d of %d", onSlow.Load(), n)
}

// createConcurrently creates n instances of a process through c with at
// most inFlight requests at once, each with vars (nil: none), handing each
// instance key to got (nil: nothing to do with them).
func createConcurrently(t *testing.T, ctx context.Context, c zbc.Client, process string, n, inFlight int, vars map[string]any, got func(int64)) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, inFlight)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cmd := c.NewCreateInstanceCommand().BPMNProcessId(process).LatestVersion()
			if vars != nil {
				var err error
				if cmd, err = cmd.VariablesFromMap(vars); err != nil {
					t.Errorf("create: %v", err)
					return
				}
			}
			resp, err := cmd.Send(ctx)
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			if got != nil {
				got(resp.ProcessInstanceKey)
			}
		}()
	}
	wg.Wait()
}
