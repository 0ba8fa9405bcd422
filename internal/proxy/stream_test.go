package proxy

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A streaming job worker through the proxy gets the jobs every shard
// pushes, merged into its one stream.
func TestJobStreamingThroughTheProxy(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards)})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("p", "pushed"), "p.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	simtest.Worker(t, c, c.NewJobWorker().JobType("pushed").Handler(func(jc worker.JobClient, job entities.Job) {
		if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(context.Background()); err == nil {
			done.Add(1)
		}
	}).StreamEnabled(true).RequestTimeout(time.Second).BackoffSupplier(load.Backoff()))
	budget.Eventually(t, 10*time.Second, "a job stream on every shard", func() bool {
		for _, s := range shards {
			if simMetric(t, s, "shardctl_sim_job_streams_open", `type="pushed"`) < 1 {
				return false
			}
		}
		return true
	})
	const n = 90
	for range n {
		if _, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	budget.Eventually(t, 20*time.Second, "every job to complete", func() bool { return done.Load() == n })
	var pushed float64
	for _, s := range shards {
		pushed += simMetric(t, s, "zeebe_job_events_total", `action="pushed"`)
	}
	if pushed == 0 {
		t.Error("no job was pushed: the worker only polled")
	}
	t.Logf("%v of %d jobs arrived by push through the proxy", pushed, n)
}

// When the worker's stream ends, jobs the proxy still buffers for it are
// handed back, not kept until their timeout.
func TestJobStreamEndGivesBufferedJobsBack(t *testing.T) {
	ctx := budget.Context(t, time.Minute)
	sctx, stop := context.WithCancel(ctx)
	// More jobs than the worker's transport, the sender and the
	// proxy's buffer of 64 hold: some find the buffer full.
	const n = 100
	p, _, gw, _ := unreadJobStream(t, sctx, Config{}, n)
	stop()
	// Every job that did not reach the worker's transport is activatable
	// again at once: poll them all well inside the one-hour job timeout.
	var got int
	budget.Eventually(t, 15*time.Second, "the jobs the worker never got", func() bool {
		got += pollNow(t, ctx, gw, "pushed", n)
		return got > 0 && proxyMetric(t, p, "shardctl_proxy_jobs_handed_back_total") > 0
	})
	t.Logf("%d jobs came back to polling; handed back by the proxy: %v", got, proxyMetric(t, p, "shardctl_proxy_jobs_handed_back_total"))
}

// unreadJobStream opens a raw job stream of type "pushed" on ctx through a
// proxy with cfg that never reads, then creates n instances whose jobs of
// 100 KiB each fill the transport's flow-control window, then the proxy's
// buffer. It returns the proxy, its one shard, a client of the
// proxy, and the stream.
func unreadJobStream(t *testing.T, ctx context.Context, cfg Config, n int) (*Proxy, *sim.Sim, pb.GatewayClient, pb.Gateway_StreamActivatedJobsClient) {
	t.Helper()
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	cfg.Shards = simtest.ShardConfigs(shards)
	p := startProxy(t, cfg)
	c := newClient(t, p.Addr().String())
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("p", "pushed"), "p.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	stream, err := gw.StreamActivatedJobs(ctx, &pb.StreamActivatedJobsRequest{Type: "pushed", Worker: "unread", Timeout: time.Hour.Milliseconds()})
	if err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 10*time.Second, "the upstream stream to open", func() bool {
		return simMetric(t, shards[0], "shardctl_sim_job_streams_open", `type="pushed"`) == 1
	})
	createConcurrently(t, ctx, c, "p", n, 8, map[string]any{"blob": strings.Repeat("x", 100<<10)}, nil)
	budget.Eventually(t, 10*time.Second, "jobs to be pushed", func() bool {
		return simMetric(t, shards[0], "zeebe_job_events_total", `action="pushed"`) > 0
	})
	return p, shards[0], gw, stream
}

// pollNow activates up to n jobs of a type that are activatable now,
// without a long poll, and says how many came.
func pollNow(t *testing.T, ctx context.Context, gw pb.GatewayClient, typ string, n int) int {
	t.Helper()
	got, err := simtest.CountJobs(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: typ, Worker: "poller", MaxJobsToActivate: int32(n), Timeout: time.Hour.Milliseconds(), RequestTimeout: -1}))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// The rest of the API through the proxy: the deprecated DeployProcess,
// CreateProcessInstanceWithResult, and the RPCs the shards do not serve.
func TestRemainingRPCsThroughTheProxy(t *testing.T) {
	shards := simtest.StartN(t, 2, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards)})
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, 30*time.Second)
	//lint:ignore SA1019 old clients still call it
	old, err := gw.DeployProcess(ctx, &pb.DeployProcessRequest{Processes: []*pb.ProcessRequestObject{{Name: "p.bpmn", Definition: load.Process("p", "calc")}}})
	if err != nil || len(old.GetProcesses()) != 1 {
		t.Fatalf("DeployProcess: %v, %v", old, err)
	}
	if slot, _ := keyslot.Split(old.GetProcesses()[0].GetProcessDefinitionKey()); slot != 1 {
		t.Errorf("definition key from the lowest slot, got slot %d", slot)
	}
	go func() {
		j := activateOne(t, c, "calc")
		cmd, _ := c.NewCompleteJobCommand().JobKey(j.Key).VariablesFromMap(map[string]any{"answer": 42})
		_, _ = cmd.Send(context.Background())
	}()
	res, err := gw.CreateProcessInstanceWithResult(ctx, &pb.CreateProcessInstanceWithResultRequest{
		Request: &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1}, RequestTimeout: 20_000,
	})
	if err != nil || !strings.Contains(res.GetVariables(), `"answer":42`) {
		t.Fatalf("with result: %v, %v", res, err)
	}
	if slot, _ := keyslot.Split(res.GetProcessInstanceKey()); slot < 1 || slot > 2 {
		t.Errorf("result's instance key carries slot %d", slot)
	}
	for name, call := range map[string]func() error{
		"EvaluateDecision": func() error {
			_, err := gw.EvaluateDecision(ctx, &pb.EvaluateDecisionRequest{DecisionId: "d"})
			return err
		},
		"DeleteResource": func() error {
			_, err := gw.DeleteResource(ctx, &pb.DeleteResourceRequest{ResourceKey: old.GetProcesses()[0].GetProcessDefinitionKey()})
			return err
		},
		"MigrateProcessInstance": func() error {
			_, err := gw.MigrateProcessInstance(ctx, &pb.MigrateProcessInstanceRequest{ProcessInstanceKey: res.GetProcessInstanceKey()})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "shard-") {
			t.Errorf("%s: %v, want the shard's UNIMPLEMENTED, naming the shard", name, err)
		}
	}
}

// A worker that stops reading its job stream: after the stall timeout its
// stream ends with RESOURCE_EXHAUSTED and the jobs waiting for it go back
// to other workers at once; every job is either in the worker's own
// transport or activatable again, none held until its timeout.
func TestStalledJobStreamIsEnded(t *testing.T) {
	// The stall ends the stream while the last jobs are created, and the
	// proxy drains its upstream stream for at most streamDrainMax: the
	// creates must be over by then, or a job the shard pushes as the
	// call is cancelled is lost in flight until its timeout. A few jobs
	// are enough to wait for the worker.
	const n = 20
	stall := budget.Of(200 * time.Millisecond)
	ctx := budget.Context(t, time.Minute)
	p, shard, gw, stream := unreadJobStream(t, ctx, Config{StreamStallTimeout: stall}, n)
	poll := func() int { return pollNow(t, ctx, gw, "pushed", n) }
	budget.Eventually(t, 10*time.Second, "the stalled stream ended", func() bool {
		return proxyMetric(t, p, "shardctl_proxy_job_streams_stalled_total") == 1
	})
	polled := 0
	budget.Eventually(t, 15*time.Second, "the jobs the worker did not take back to polling", func() bool {
		polled += poll()
		return polled > 0 && simMetric(t, shard, "shardctl_sim_job_streams_open", `type="pushed"`) == 0
	})
	// What the slow worker's transport holds it still reads, then the
	// status that says why the stream ended.
	streamed := 0
	for {
		_, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "read nothing for") {
				t.Errorf("the stalled stream ended with %v, want RESOURCE_EXHAUSTED saying the worker read nothing", err)
			}
			break
		}
		streamed++
	}
	// Jobs the shard pushed while the poll ran may still be on their way
	// back: poll until every job is accounted for.
	budget.Eventually(t, 15*time.Second, "every job with the slow worker or polled", func() bool {
		polled += poll()
		return streamed+polled == n
	})
	t.Logf("stall %v: %d jobs reached the slow worker, %d went back to polling; handed back by the proxy %v",
		stall, streamed, polled, proxyMetric(t, p, "shardctl_proxy_jobs_handed_back_total", `reason="worker stalled"`))
	if streamed+polled != n {
		t.Errorf("%d streamed + %d polled, want all %d", streamed, polled, n)
	}
}
