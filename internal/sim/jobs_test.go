package sim

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
)

func deploy(t testing.TB, c zbc.Client, name string, xml []byte) {
	t.Helper()
	if _, err := c.NewDeployResourceCommand().AddResource(xml, name).Send(context.Background()); err != nil {
		t.Fatalf("deploy %s: %v", name, err)
	}
}

func create(t testing.TB, c zbc.Client, id string, vars map[string]any) int64 {
	t.Helper()
	cmd, err := c.NewCreateInstanceCommand().BPMNProcessId(id).LatestVersion().VariablesFromMap(vars)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cmd.Send(context.Background())
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return resp.ProcessInstanceKey
}

// activate polls once without waiting: with no deadline on its context
// the Go client sends requestTimeout -1.
func activate(t testing.TB, c zbc.Client, typ string, max int32, timeout time.Duration) []entities.Job {
	t.Helper()
	jobs, err := c.NewActivateJobsCommand().JobType(typ).MaxJobsToActivate(max).Timeout(timeout).Send(context.Background())
	if err != nil {
		t.Fatalf("activate %s: %v", typ, err)
	}
	return jobs
}

// activateOne waits until exactly one job of the type can be activated.
func activateOne(t testing.TB, c zbc.Client, typ string) entities.Job {
	t.Helper()
	var got []entities.Job
	budget.Eventually(t, 10*time.Second, "a "+typ+" job", func() bool {
		got = activate(t, c, typ, 1, time.Minute)
		return len(got) == 1
	})
	return got[0]
}

func TestFailRetryIncidentResolve(t *testing.T) {
	s := startSim(t, Config{Partitions: 2})
	c := newClient(t, s)
	ctx := budget.Context(t, 30*time.Second)
	deploy(t, c, "p.bpmn", linearProcess("p", 2, "work"))
	inst := create(t, c, "p", nil)

	job := activateOne(t, c, "work")
	if job.Retries != 2 || job.ProcessInstanceKey != inst || job.Worker != "default" {
		t.Fatalf("job %+v", job)
	}
	// Retries as given, no backoff: activatable again at once.
	if _, err := c.NewFailJobCommand().JobKey(job.Key).Retries(1).ErrorMessage("flaky").Send(ctx); err != nil {
		t.Fatal(err)
	}
	again := activate(t, c, "work", 5, time.Minute)
	if len(again) != 1 || again[0].Key != job.Key || again[0].Retries != 1 {
		t.Fatalf("after fail: %+v", again)
	}
	// No retries left: an incident, and nothing to activate.
	if _, err := c.NewFailJobCommand().JobKey(job.Key).Retries(0).ErrorMessage("broken").Send(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(activate(t, c, "work", 5, time.Minute)); n != 0 {
		t.Fatalf("%d jobs activatable with no retries", n)
	}
	if _, err := c.NewCompleteJobCommand().JobKey(job.Key).Send(ctx); grpcCode(err) != codes.FailedPrecondition {
		t.Errorf("completing a job with an incident: %v, want FAILED_PRECONDITION", err)
	}
	incidents := incidentKeys(t, s)
	if len(incidents) != 1 {
		t.Fatalf("incidents %v, want one", incidents)
	}
	if got := scrape(t, s, "zeebe_pending_incidents"); got != 1 { // Micrometer's name (8.6+)
		t.Errorf("zeebe_pending_incidents = %v with one incident open, want 1", got)
	}
	// Resolving while retries are still 0 raises a new incident at once.
	if _, err := c.NewResolveIncidentCommand().IncidentKey(incidents[0]).Send(ctx); err != nil {
		t.Fatal(err)
	}
	second := incidentKeys(t, s)
	if len(second) != 1 || second[0] == incidents[0] {
		t.Fatalf("after resolving with no retries: incidents %v", second)
	}
	if _, err := c.NewResolveIncidentCommand().IncidentKey(incidents[0]).Send(ctx); grpcCode(err) != codes.NotFound {
		t.Errorf("resolving a resolved incident: %v, want NOT_FOUND", err)
	}
	if _, err := c.NewUpdateJobRetriesCommand().JobKey(job.Key).Retries(3).Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewResolveIncidentCommand().IncidentKey(second[0]).Send(ctx); err != nil {
		t.Fatal(err)
	}
	job = activateOne(t, c, "work")
	if job.Retries != 3 {
		t.Errorf("retries after update = %d, want 3", job.Retries)
	}
	if _, err := c.NewCompleteJobCommand().JobKey(job.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 5*time.Second, "the instance to complete", func() bool { return activeInstances(t, s) == 0 })
	if got := scrape(t, s, "zeebe_incident_events_total", `action="created"`); got != 2 {
		t.Errorf("incidents created = %v, want 2", got)
	}
	if got := scrape(t, s, "zeebe_pending_incidents_total"); got != 0 {
		t.Errorf("zeebe_pending_incidents_total = %v after every incident was resolved, want 0", got)
	}
}

func TestFailWithBackoff(t *testing.T) {
	s := startSim(t, Config{Partitions: 1, TimerInterval: 20 * time.Millisecond})
	c := newClient(t, s)
	ctx := budget.Context(t, 10*time.Second)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "work"))
	create(t, c, "p", nil)
	job := activateOne(t, c, "work")
	if _, err := c.NewFailJobCommand().JobKey(job.Key).Retries(2).RetryBackoff(300 * time.Millisecond).Send(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(activate(t, c, "work", 1, time.Minute)); n != 0 {
		t.Fatal("a job in retry backoff was activatable at once")
	}
	if again := activateOne(t, c, "work"); again.Key != job.Key || again.Retries != 2 {
		t.Errorf("after backoff: %+v", again)
	}
}

func TestJobTimeout(t *testing.T) {
	s := startSim(t, Config{Partitions: 1, TimerInterval: 20 * time.Millisecond})
	c := newClient(t, s)
	ctx := budget.Context(t, 10*time.Second)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "work"))
	create(t, c, "p", nil)
	jobs := activate(t, c, "work", 1, 100*time.Millisecond)
	if len(jobs) != 1 {
		t.Fatal("no job")
	}
	// Timed out: activatable again, retries unchanged.
	again := activateOne(t, c, "work")
	if again.Key != jobs[0].Key || again.Retries != 3 {
		t.Errorf("after timeout: %+v", again)
	}
	if scrape(t, s, "zeebe_job_events_total", `action="timed out"`) < 1 {
		t.Error("no timed out job event")
	}
	// A longer timeout keeps it.
	if _, err := c.NewUpdateJobTimeoutCommand().JobKey(again.Key).Timeout(time.Hour.Milliseconds()).Send(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the job timer run a few times
	if n := len(activate(t, c, "work", 1, time.Minute)); n != 0 {
		t.Error("the job timed out despite the updated timeout")
	}
	// Zeebe lets any holder complete it.
	if _, err := c.NewCompleteJobCommand().JobKey(again.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewCompleteJobCommand().JobKey(again.Key).Send(ctx); grpcCode(err) != codes.NotFound {
		t.Errorf("completing twice: %v, want NOT_FOUND", err)
	}
}

const errorProcess = bpmnHead + `<bpmn:error id="e1" errorCode="NO_STOCK"/>
<bpmn:process id="reserve" isExecutable="true">
<bpmn:startEvent id="start"/>
<bpmn:serviceTask id="reserveTask"><bpmn:extensionElements><zeebe:taskDefinition type="reserve"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:boundaryEvent id="noStock" attachedToRef="reserveTask"><bpmn:errorEventDefinition errorRef="e1"/></bpmn:boundaryEvent>
<bpmn:serviceTask id="backorder"><bpmn:extensionElements><zeebe:taskDefinition type="backorder"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:endEvent id="done"/><bpmn:endEvent id="backordered"/>
<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="reserveTask"/>
<bpmn:sequenceFlow id="f2" sourceRef="reserveTask" targetRef="done"/>
<bpmn:sequenceFlow id="f3" sourceRef="noStock" targetRef="backorder"/>
<bpmn:sequenceFlow id="f4" sourceRef="backorder" targetRef="backordered"/>
</bpmn:process></bpmn:definitions>`

func TestThrowError(t *testing.T) {
	s := startSim(t, Config{Partitions: 1})
	c := newClient(t, s)
	ctx := budget.Context(t, 10*time.Second)
	deploy(t, c, "reserve.bpmn", []byte(errorProcess))

	// Caught by the boundary event: the error path runs.
	create(t, c, "reserve", nil)
	job := activateOne(t, c, "reserve")
	cmd, _ := c.NewThrowErrorCommand().JobKey(job.Key).ErrorCode("NO_STOCK").ErrorMessage("sold out").VariablesFromMap(map[string]any{"why": "sold out"})
	if _, err := cmd.Send(ctx); err != nil {
		t.Fatal(err)
	}
	back := activateOne(t, c, "backorder")
	vars, _ := back.GetVariablesAsMap()
	if vars["why"] != "sold out" {
		t.Errorf("variables of the error path: %v", vars)
	}
	if _, err := c.NewCompleteJobCommand().JobKey(back.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}

	// Not caught: an incident; resolving it makes the job activatable.
	create(t, c, "reserve", nil)
	job = activateOne(t, c, "reserve")
	if _, err := c.NewThrowErrorCommand().JobKey(job.Key).ErrorCode("PAYMENT").Send(ctx); err != nil {
		t.Fatal(err)
	}
	incidents := incidentKeys(t, s)
	if len(incidents) != 1 {
		t.Fatalf("incidents %v", incidents)
	}
	if _, err := c.NewResolveIncidentCommand().IncidentKey(incidents[0]).Send(ctx); err != nil {
		t.Fatal(err)
	}
	job = activateOne(t, c, "reserve")
	if _, err := c.NewCompleteJobCommand().JobKey(job.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 5*time.Second, "both instances to end", func() bool { return activeInstances(t, s) == 0 })
	if _, err := c.NewThrowErrorCommand().JobKey(job.Key).ErrorCode("X").Send(ctx); grpcCode(err) != codes.NotFound {
		t.Errorf("throwing on a completed job: %v", err)
	}
}

func TestLongPolling(t *testing.T) {
	s := startSim(t, Config{Partitions: 2})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "slow"))

	// requestTimeout < 0: answers at once, empty.
	if n := len(activate(t, c, "slow", 10, time.Minute)); n != 0 {
		t.Fatalf("%d jobs before any instance", n)
	}
	// requestTimeout > 0: waits, and is woken by the job's creation.
	got := make(chan []entities.Job, 1)
	go func() {
		// A deadline on the context makes the client long-poll.
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(30*time.Second))
		defer cancel()
		jobs, _ := c.NewActivateJobsCommand().JobType("slow").MaxJobsToActivate(10).Send(ctx)
		got <- jobs
	}()
	budget.Eventually(t, 5*time.Second, "the poll to park", func() bool { return s.cluster.pollers.n.Load() == 1 })
	create(t, c, "p", nil)
	select {
	case jobs := <-got:
		if len(jobs) != 1 {
			t.Fatalf("long poll returned %d jobs, want 1", len(jobs))
		}
	case <-time.After(budget.Of(20 * time.Second)):
		t.Fatal("the long poll was not woken by a new job")
	}
	// A long poll that sees no job ends empty at its timeout.
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	jobs, err := c.NewActivateJobsCommand().JobType("none").MaxJobsToActivate(1).Send(short)
	if err != nil || len(jobs) != 0 {
		t.Errorf("empty long poll: %v, %d jobs", err, len(jobs))
	}
	// maxJobsToActivate is a ceiling.
	for range 5 {
		create(t, c, "p", nil)
	}
	if n := len(activate(t, c, "slow", 3, time.Minute)); n != 3 {
		t.Errorf("activated %d, want 3 of 5", n)
	}
}

func TestJobStreaming(t *testing.T) {
	s := startSim(t, Config{Partitions: 3})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "push"))
	var completed atomic.Int64
	w := c.NewJobWorker().JobType("push").Handler(func(jc worker.JobClient, job entities.Job) {
		if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(context.Background()); err == nil {
			completed.Add(1)
		}
	}).StreamEnabled(true).RequestTimeout(time.Second).BackoffSupplier(load.Backoff()).Open()
	t.Cleanup(w.Close)
	budget.Eventually(t, 10*time.Second, "the job stream to open", func() bool { return s.cluster.streams.n.Load() == 1 })
	const n = 50
	for range n {
		create(t, c, "p", nil)
	}
	budget.Eventually(t, 20*time.Second, "every pushed job to complete", func() bool { return completed.Load() == n })
	if got := scrape(t, s, "zeebe_job_events_total", `action="pushed"`); got != n {
		t.Errorf("pushed = %v, want %d: jobs created after the stream opened are pushed", got, n)
	}
}

// brokenStream is a job stream whose transport fails after n sends.
type brokenStream struct {
	grpc.ServerStream
	ctx  context.Context
	n    int
	sent atomic.Int32
}

func (b *brokenStream) Context() context.Context { return b.ctx }
func (b *brokenStream) Send(*pb.ActivatedJob) error {
	if int(b.sent.Load()) >= b.n {
		return errors.New("connection reset by peer")
	}
	b.sent.Add(1)
	return nil
}

// A job a stream cannot deliver, and every job still in its buffer when it
// ends, is activatable again at once: none is stranded until its timeout.
func TestJobStreamGivesBackUndelivered(t *testing.T) {
	s := startSim(t, Config{Partitions: 1})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "push"))
	s.Pause(time.Hour) // hold the jobs back until the stream is full
	for range 5 {
		go func() {
			_, _ = c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(context.Background())
		}()
	}
	budget.Eventually(t, 10*time.Second, "five creations to queue", func() bool { return s.QueueLength()[0] == 5 })
	stream := &brokenStream{ctx: context.Background(), n: 1}
	done := make(chan error, 1)
	go func() {
		done <- s.gw.StreamActivatedJobs(&pb.StreamActivatedJobsRequest{Type: "push", Worker: "w", Timeout: 60_000}, stream)
	}()
	budget.Eventually(t, 10*time.Second, "the job stream to open", func() bool { return s.cluster.streams.n.Load() == 1 })
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the stream ended without the transport error")
		}
	case <-time.After(budget.Of(10 * time.Second)):
		t.Fatal("the stream did not end on a failed send")
	}
	var got int
	budget.Eventually(t, 10*time.Second, "four undelivered jobs to come back", func() bool {
		got += len(activate(t, c, "push", 10, time.Minute))
		return got == 4
	})
	if n := stream.sent.Load(); n != 1 {
		t.Errorf("%d jobs delivered, want 1", n)
	}
}

func TestLargeBatchesAreSplit(t *testing.T) {
	s := startSim(t, Config{Partitions: 1})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "big"))
	blob := strings.Repeat("x", 512<<10) // 0.5 MiB of variables per job
	for range 12 {
		create(t, c, "p", map[string]any{"blob": blob})
	}
	// 6 MiB of jobs: more than one gRPC message may carry to the client.
	var got int
	budget.Eventually(t, 10*time.Second, "all twelve jobs", func() bool {
		got += len(activate(t, c, "big", 100, time.Minute))
		return got == 12
	})
}
