package proxy

import (
	"context"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// TestNoJobIsStranded makes jobs surplus on purpose: a worker that takes
// one job at a time long-polls every shard at once through the proxy, and
// then every shard gets a job at the same moment. All of them answer that
// one poll; the jobs beyond the first must be handed back at once, so every
// instance completes long before the 5-minute job timeout would have freed
// them.
func TestNoJobIsStranded(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards)})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("p", "one-at-a-time"), "p.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	simtest.Worker(t, c, c.NewJobWorker().JobType("one-at-a-time").Handler(func(jc worker.JobClient, job entities.Job) {
		if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(context.Background()); err == nil {
			done.Add(1)
		}
	}).MaxJobsActive(1).Concurrency(1).Timeout(5*time.Minute).RequestTimeout(20*time.Second).PollInterval(5*time.Millisecond).BackoffSupplier(load.Backoff()))
	direct := make([]zbc.Client, len(shards))
	for i, s := range shards {
		direct[i] = newClient(t, s.Addr().String())
	}
	parked := func() bool {
		for _, s := range shards {
			if simMetric(t, s, "zeebe_long_polling_queued_current", `type="one-at-a-time"`) < 1 {
				return false
			}
		}
		return true
	}
	const rounds = 10
	for round := range rounds {
		budget.Eventually(t, 20*time.Second, "the worker's poll to park on every shard", parked)
		var wg sync.WaitGroup
		for _, d := range direct {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := d.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		budget.Eventually(t, 20*time.Second, "the round's jobs to be completed", func() bool { return done.Load() == int64(3*(round+1)) })
	}
	handed := proxyMetric(t, p, "shardctl_proxy_jobs_handed_back_total")
	if handed == 0 {
		t.Fatal("no job was handed back: the test did not make surplus jobs")
	}
	t.Logf("%d jobs completed one at a time, %v of them handed back first and delivered again", 3*rounds, handed)
}

// TestSaturatedShardsRefuseAtOnce saturates every shard: the client must
// get RESOURCE_EXHAUSTED fast, memory must stay flat, and every instance
// the federation accepted must complete.
func TestSaturatedShardsRefuseAtOnce(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 1, Capacity: 200, BacklogLimit: 4})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), CoolingOff: 100 * time.Millisecond})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("p", "w"), "p.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	var completed atomic.Int64
	simtest.Worker(t, c, c.NewJobWorker().JobType("w").Handler(func(jc worker.JobClient, job entities.Job) {
		if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(context.Background()); err == nil {
			completed.Add(1)
		}
	}).MaxJobsActive(64).Concurrency(4).RequestTimeout(time.Second).BackoffSupplier(load.Backoff()))

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	var accepted atomic.Int64
	// An open-loop load at a fixed rate well above what the shards take:
	// a closed loop would measure its own queue (Little's law), not how
	// fast the proxy refuses. It returns how long each refusal took,
	// sorted.
	load := func(c zbc.Client, rate int, d time.Duration) []time.Duration {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var refusedIn []time.Duration
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		stop := time.After(d)
		for {
			select {
			case <-tick.C:
				wg.Go(func() {
					start := time.Now()
					_, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx)
					took := time.Since(start)
					switch status.Code(err) {
					case codes.OK:
						accepted.Add(1)
					case codes.ResourceExhausted:
						mu.Lock()
						refusedIn = append(refusedIn, took)
						mu.Unlock()
					default:
						t.Errorf("create: %v", err)
					}
				})
			case <-stop:
				wg.Wait()
				slices.Sort(refusedIn)
				return refusedIn
			}
		}
	}
	p99 := func(d []time.Duration) time.Duration { return d[len(d)*99/100] }
	load(c, 1000, time.Second) // warm up
	// The baseline runs at the same time, so both see the same machine:
	// a load straight at one saturated shard. A refusal through the proxy
	// may ask every shard in turn (until they cool off) and crosses two
	// connections; a queue in the proxy would add far more than that.
	shardClient := newClient(t, shards[0].Addr().String())
	before := heap()
	var refused, direct []time.Duration
	var both sync.WaitGroup
	both.Go(func() { refused = load(c, 1000, 3*time.Second) })
	both.Go(func() { direct = load(shardClient, 500, 3*time.Second) })
	both.Wait()
	after := heap()
	n := len(refused)
	if n == 0 || len(direct) == 0 {
		t.Fatalf("%d refused through the proxy, %d straight from a shard: the shards were not saturated", n, len(direct))
	}
	bound := max(5*time.Millisecond, 5*p99(direct))
	t.Logf("%d accepted, %d refused; RESOURCE_EXHAUSTED after p50 %v, p99 %v through the proxy, p99 %v straight from a shard meanwhile; heap %d -> %d KiB",
		accepted.Load(), n, refused[n/2], p99(refused), p99(direct), before>>10, after>>10)
	if p99(refused) > bound {
		t.Errorf("RESOURCE_EXHAUSTED p99 %v through the proxy, want within %v (5 × the shard's own p99 %v meanwhile, at least 5 ms)", p99(refused), bound, p99(direct))
	}
	if after > before+32<<20 {
		t.Errorf("heap grew from %d to %d KiB under refusal: something is queueing", before>>10, after>>10)
	}
	deadline := time.Now().Add(budget.Of(45 * time.Second))
	for completed.Load() != accepted.Load() {
		if time.Now().After(deadline) {
			for i, s := range shards {
				t.Logf("shard %d: jobs created %v activated %v completed %v failed %v timed out %v; instances activated %v completed %v",
					i+1, simMetric(t, s, "zeebe_job_events_total", `action="created"`), simMetric(t, s, "zeebe_job_events_total", `action="activated"`),
					simMetric(t, s, "zeebe_job_events_total", `action="completed"`), simMetric(t, s, "zeebe_job_events_total", `action="failed"`),
					simMetric(t, s, "zeebe_job_events_total", `action="timed out"`),
					simMetric(t, s, "zeebe_executed_instances_total", `action="activated"`), simMetric(t, s, "zeebe_executed_instances_total", `action="completed"`))
			}
			t.Fatalf("%d of %d accepted instances completed; handed back %v", completed.Load(), accepted.Load(), proxyMetric(t, p, "shardctl_proxy_jobs_handed_back_total"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	var done float64
	for _, s := range shards {
		done += simMetric(t, s, "zeebe_executed_instances_total", `action="completed"`)
	}
	if done != float64(accepted.Load()) {
		t.Errorf("%v instances completed on the shards, %d accepted", done, accepted.Load())
	}
}

// Stopping the proxy ends parked long polls at once instead of waiting
// out their request timeout.
func TestCloseEndsLongPolls(t *testing.T) {
	shards := simtest.StartN(t, 2, sim.Config{Partitions: 1})
	p, err := New(Config{Front: os.Getenv(envFront), Listen: "127.0.0.1:0", Shards: simtest.ShardConfigs(shards)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, p.Addr().String())
	polled := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(time.Minute))
		defer cancel()
		_, err := c.NewActivateJobsCommand().JobType("never").MaxJobsToActivate(1).Send(ctx)
		polled <- err
	}()
	budget.Eventually(t, 10*time.Second, "the long poll to park on the shards", func() bool {
		return simMetric(t, shards[0], "zeebe_long_polling_queued_current", `type="never"`) == 1
	})
	start := time.Now()
	ctx := budget.Context(t, 30*time.Second)
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > budget.Of(2*time.Second) {
		t.Errorf("Close took %v with a parked long poll", took)
	}
	select {
	case <-polled:
	case <-time.After(budget.Of(10 * time.Second)):
		t.Error("the worker's poll did not end when the proxy stopped")
	}
}

// Jobs handed back while the proxy stops reach their shard: Close waits
// for the hand-back before it closes the connections (it ran detached
// and failed on a closed connection before, leaving the job stranded
// until its timeout). A second Close returns what the first did.
func TestCloseWaitsForHandBacks(t *testing.T) {
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	p, err := New(Config{Front: os.Getenv(envFront), Listen: "127.0.0.1:0", Shards: simtest.ShardConfigs(shards)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := budget.Context(t, time.Minute)
	direct := newClient(t, shards[0].Addr().String())
	if _, err := direct.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := direct.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	activate := func() []entities.Job {
		jobs, err := direct.NewActivateJobsCommand().JobType("work").MaxJobsToActivate(3).Timeout(time.Hour).Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	jobs := activate()
	if len(jobs) != 3 {
		t.Fatalf("activated %d jobs, want 3", len(jobs))
	}
	back := proxyJobs(t, jobs)
	// The shard takes a moment to process each hand-back, as a busy one
	// does.
	shards[0].Pause(300 * time.Millisecond)
	p.gateway.HandBack(p.ShardByID("shard-1"), back, "test")
	closeErr := p.Close(ctx)
	if closeErr != nil {
		t.Fatal(closeErr)
	}
	if again := activate(); len(again) != 3 {
		t.Errorf("after Close %d of the 3 handed-back jobs are activatable", len(again))
	}
	if err := p.Close(ctx); err != closeErr {
		t.Errorf("second Close: %v, want %v", err, closeErr)
	}
}

// proxyJobs reads the Go client's jobs (its 8.5 messages) as the
// proxy's.
func proxyJobs(t *testing.T, jobs []entities.Job) []*pb.ActivatedJob {
	t.Helper()
	out := make([]*pb.ActivatedJob, 0, len(jobs))
	for _, j := range jobs {
		b, err := proto.Marshal(j.ActivatedJob)
		if err != nil {
			t.Fatal(err)
		}
		job := &pb.ActivatedJob{}
		if err := proto.Unmarshal(b, job); err != nil {
			t.Fatal(err)
		}
		out = append(out, job)
	}
	return out
}

// A lone shard gets one long poll per worker poll, no sweep before it;
// when the shard refuses it with RESOURCE_EXHAUSTED the worker hears so
// at once and backs off, rather than poll again at once.
func TestLoneShardLongPoll(t *testing.T) {
	shard := simtest.StartN(t, 1, sim.Config{Partitions: 1, BacklogLimit: 2})[0]
	p := startProxy(t, Config{Shards: simtest.ShardConfigs([]*sim.Sim{shard})})
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	ctx := budget.Context(t, time.Minute)
	if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "lone.bpmn", Content: load.Process("lone", "lone-task")}}}); err != nil {
		t.Fatal(err)
	}
	poll := func(timeout time.Duration) (int, error) {
		return simtest.CountJobs(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "lone-task", Worker: "w", MaxJobsToActivate: 5, Timeout: 60000, RequestTimeout: timeout.Milliseconds()}))
	}
	// A job created while the poll waits reaches it, through one call.
	upstream := func() float64 {
		return proxyMetric(t, p, "shardctl_proxy_shard_requests_total", `rpc="ActivateJobs"`, `code="OK"`)
	}
	before := upstream()
	created := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		_, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "lone", Version: -1})
		created <- err
	}()
	if n, err := poll(budget.Of(10 * time.Second)); err != nil || n != 1 {
		t.Fatalf("the long poll got %d jobs, %v; want the one created while it waited", n, err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if calls := upstream() - before; calls != 1 {
		t.Errorf("the shard got %v activations for one poll, want 1", calls)
	}
	// A stalled shard with a full backlog refuses the poll.
	direct := pb.NewGatewayClient(dial(t, shard.Addr().String()))
	shard.Pause(budget.Of(5 * time.Second))
	for range 4 {
		go func() {
			_, _ = direct.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "lone", Version: -1})
		}()
	}
	budget.Eventually(t, 10*time.Second, "the shard to refuse a poll", func() bool {
		start := time.Now()
		_, err := poll(2 * time.Second)
		if status.Code(err) != codes.ResourceExhausted {
			return false
		}
		if took := time.Since(start); took > budget.Of(time.Second) {
			t.Errorf("the refusal took %v, want it at once", took)
		}
		return true
	})
}
