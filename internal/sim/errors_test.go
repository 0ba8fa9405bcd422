package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

func TestDeployVersions(t *testing.T) {
	s := startSim(t, Config{Partitions: 2})
	c := newClient(t, s)
	ctx := budget.Context(t, 10*time.Second)
	v1 := linearProcess("p", 3, "a")
	first, err := c.NewDeployResourceCommand().AddResource(v1, "p.bpmn").Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	same, err := c.NewDeployResourceCommand().AddResource(v1, "p.bpmn").Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p1, p1again := first.Deployments[0].GetProcess(), same.Deployments[0].GetProcess()
	if p1again.Version != 1 || p1again.ProcessDefinitionKey != p1.ProcessDefinitionKey {
		t.Errorf("identical resource: version %d key %d, want version 1 key %d", p1again.Version, p1again.ProcessDefinitionKey, p1.ProcessDefinitionKey)
	}
	changed, err := c.NewDeployResourceCommand().AddResource(linearProcess("p", 3, "a", "b"), "p.bpmn").Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2 := changed.Deployments[0].GetProcess()
	if p2.Version != 2 || p2.ProcessDefinitionKey == p1.ProcessDefinitionKey {
		t.Errorf("changed resource: %+v", p2)
	}
	// By definition key: exactly that version; by id: the latest.
	byKey, err := c.NewCreateInstanceCommand().ProcessDefinitionKey(p1.ProcessDefinitionKey).Send(ctx)
	if err != nil || byKey.Version != 1 {
		t.Errorf("create by key: %+v, %v", byKey, err)
	}
	latest, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx)
	if err != nil || latest.Version != 2 {
		t.Errorf("create latest: %+v, %v", latest, err)
	}
	v1inst, err := c.NewCreateInstanceCommand().BPMNProcessId("p").Version(1).Send(ctx)
	if err != nil || v1inst.Version != 1 {
		t.Errorf("create version 1: %+v, %v", v1inst, err)
	}
	// The deprecated DeployProcess answers the same way.
	//lint:ignore SA1019 old clients still call it
	old, err := pb.NewGatewayClient(dial(t, s)).DeployProcess(ctx, &pb.DeployProcessRequest{Processes: []*pb.ProcessRequestObject{{Name: "p.bpmn", Definition: v1}}})
	if err != nil || len(old.Processes) != 1 || old.Processes[0].Version != 3 {
		t.Errorf("DeployProcess: %+v, %v", old, err)
	}
}

func TestErrorsAsZeebeReturnsThem(t *testing.T) {
	s := startSim(t, Config{Partitions: 2})
	gw := pb.NewGatewayClient(dial(t, s))
	ctx := budget.Context(t, 20*time.Second)
	good := linearProcess("p", 3, "a")
	if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "p.bpmn", Content: good}}}); err != nil {
		t.Fatal(err)
	}
	unknownJob := int64(1)<<51 + 999_999
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"deploy nothing", func() error { _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{}); return err }, codes.InvalidArgument, "at least one resource"},
		{"deploy broken XML", func() error {
			_, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "x.bpmn", Content: []byte("<definitions")}}})
			return err
		}, codes.InvalidArgument, "'x.bpmn': not well-formed XML"},
		{"deploy unsupported element", func() error {
			xml := strings.Replace(string(good), "<bpmn:endEvent id=\"end\"/>", "<bpmn:userTask id=\"end\"/>", 1)
			_, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "u.bpmn", Content: []byte(xml)}}})
			return err
		}, codes.InvalidArgument, "element 'end' of type <userTask>"},
		{"deploy a text file", func() error {
			_, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "notes.txt", Content: []byte("hi")}}})
			return err
		}, codes.InvalidArgument, "Resource type is not supported"},
		{"deploy for a tenant", func() error {
			_, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{TenantId: "acme", Resources: []*pb.Resource{{Name: "p.bpmn", Content: good}}})
			return err
		}, codes.InvalidArgument, "multi-tenancy is disabled"},
		{"create without process", func() error {
			_, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{})
			return err
		}, codes.InvalidArgument, "bpmnProcessId"},
		{"create unknown process", func() error {
			_, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "nope", Version: -1})
			return err
		}, codes.NotFound, "process ID 'nope'"},
		{"create unknown version", func() error {
			_, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: 7})
			return err
		}, codes.NotFound, "version '7'"},
		{"create with a JSON array", func() error {
			_, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1, Variables: "[1,2]"})
			return err
		}, codes.InvalidArgument, "Property 'variables' is invalid"},
		{"create with broken JSON", func() error {
			_, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1, Variables: "{"})
			return err
		}, codes.InvalidArgument, "Property 'variables' is invalid"},
		{"start at an unknown element", func() error {
			_, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1, StartInstructions: []*pb.ProcessInstanceCreationStartInstruction{{ElementId: "nowhere"}}})
			return err
		}, codes.InvalidArgument, "'nowhere'"},
		{"activate blank type", func() error {
			return recvErr(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: " ", MaxJobsToActivate: 1}))
		}, codes.InvalidArgument, "non-empty job type"},
		{"activate zero jobs", func() error {
			return recvErr(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "a", MaxJobsToActivate: 0}))
		}, codes.InvalidArgument, "maxJobsToActivate"},
		{"stream blank type", func() error { return recvErr(gw.StreamActivatedJobs(ctx, &pb.StreamActivatedJobsRequest{})) }, codes.InvalidArgument, "non-empty job type"},
		{"complete unknown job", func() error { _, err := gw.CompleteJob(ctx, &pb.CompleteJobRequest{JobKey: unknownJob}); return err }, codes.NotFound, "no such job"},
		{"fail unknown job", func() error { _, err := gw.FailJob(ctx, &pb.FailJobRequest{JobKey: unknownJob}); return err }, codes.NotFound, "no such job"},
		{"key of no partition", func() error { _, err := gw.CompleteJob(ctx, &pb.CompleteJobRequest{JobKey: 12345}); return err }, codes.Unavailable, "partition 0"},
		{"key of partition 9", func() error { _, err := gw.CompleteJob(ctx, &pb.CompleteJobRequest{JobKey: 9<<51 + 1}); return err }, codes.Unavailable, "partition 9"},
		{"throw without code", func() error { _, err := gw.ThrowError(ctx, &pb.ThrowErrorRequest{JobKey: unknownJob}); return err }, codes.InvalidArgument, "error code"},
		{"zero retries", func() error {
			_, err := gw.UpdateJobRetries(ctx, &pb.UpdateJobRetriesRequest{JobKey: unknownJob, Retries: 0})
			return err
		}, codes.InvalidArgument, "greater than zero"},
		{"cancel unknown instance", func() error {
			_, err := gw.CancelProcessInstance(ctx, &pb.CancelProcessInstanceRequest{ProcessInstanceKey: unknownJob})
			return err
		}, codes.NotFound, "no such process"},
		{"resolve unknown incident", func() error {
			_, err := gw.ResolveIncident(ctx, &pb.ResolveIncidentRequest{IncidentKey: unknownJob})
			return err
		}, codes.NotFound, "no such incident"},
		{"set variables to a string", func() error {
			_, err := gw.SetVariables(ctx, &pb.SetVariablesRequest{ElementInstanceKey: unknownJob, Variables: `"x"`})
			return err
		}, codes.InvalidArgument, "Property 'variables'"},
		{"message without name", func() error { _, err := gw.PublishMessage(ctx, &pb.PublishMessageRequest{}); return err }, codes.InvalidArgument, "non-empty name"},
		{"signal without name", func() error { _, err := gw.BroadcastSignal(ctx, &pb.BroadcastSignalRequest{}); return err }, codes.InvalidArgument, "non-empty name"},
		{"decisions", func() error { _, err := gw.EvaluateDecision(ctx, &pb.EvaluateDecisionRequest{}); return err }, codes.Unimplemented, "EvaluateDecision is not supported"},
		{"modify", func() error {
			_, err := gw.ModifyProcessInstance(ctx, &pb.ModifyProcessInstanceRequest{})
			return err
		}, codes.Unimplemented, "ModifyProcessInstance"},
		{"migrate", func() error {
			_, err := gw.MigrateProcessInstance(ctx, &pb.MigrateProcessInstanceRequest{})
			return err
		}, codes.Unimplemented, "MigrateProcessInstance"},
		{"delete resource", func() error { _, err := gw.DeleteResource(ctx, &pb.DeleteResourceRequest{}); return err }, codes.Unimplemented, "DeleteResource"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if grpcCode(err) != tt.code {
				t.Fatalf("got %v, want %v", err, tt.code)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q does not contain %q", err, tt.msg)
			}
		})
	}
}

// recvErr reads a server stream to its end and returns its error.
func recvErr[T any](stream interface{ Recv() (T, error) }, err error) error {
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if err.Error() == "EOF" {
				return nil
			}
			return err
		}
	}
}

func TestBackpressure(t *testing.T) {
	s := startSim(t, Config{Partitions: 2, Capacity: 100, BacklogLimit: 5})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "a"))
	const n = 200
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(context.Background())
			errs <- err
		}()
	}
	var ok, rejected int
	for range n {
		switch err := <-errs; grpcCode(err) {
		case codes.OK:
			ok++
		case codes.ResourceExhausted:
			rejected++
		default:
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok == 0 || rejected == 0 {
		t.Fatalf("%d accepted, %d rejected: want both above a backlog limit of 5", ok, rejected)
	}
	if got := scrape(t, s, "zeebe_dropped_request_count_total"); got < float64(rejected) {
		t.Errorf("dropped requests metric %v < %d rejections (each rejected create was tried on every partition)", got, rejected)
	}
	if got := scrape(t, s, "zeebe_backpressure_requests_limit"); got != 10 {
		t.Errorf("requests limit metric = %v, want 5 per partition", got)
	}
}

// Zeebe's backpressure never rejects completing or failing a job,
// cancelling an instance or deploying: an overloaded partition must still
// be able to work its backlog off.
func TestBackpressureExemptions(t *testing.T) {
	s := startSim(t, Config{Partitions: 1, BacklogLimit: 1})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "a"))
	inst := create(t, c, "p", nil)
	job := activateOne(t, c, "a")

	s.Pause(time.Hour)
	go func() {
		_, _ = c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(context.Background())
	}()
	budget.Eventually(t, 5*time.Second, "the partition to be full", func() bool { return s.QueueLength()[0] == 1 })
	if _, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(context.Background()); grpcCode(err) != codes.ResourceExhausted {
		t.Fatalf("create on a full partition: %v, want RESOURCE_EXHAUSTED", err)
	}
	errs := make(chan error, 3)
	go func() { _, err := c.NewCompleteJobCommand().JobKey(job.Key).Send(context.Background()); errs <- err }()
	go func() {
		_, err := c.NewDeployResourceCommand().AddResource(linearProcess("q", 3, "b"), "q.bpmn").Send(context.Background())
		errs <- err
	}()
	budget.Eventually(t, 5*time.Second, "the exempt commands to queue", func() bool { return s.QueueLength()[0] == 3 })
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("exempt command rejected: %v", err)
		}
	}
	if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(inst).Send(context.Background()); grpcCode(err) != codes.NotFound {
		t.Errorf("cancel after completion: %v (the instance should have completed)", err)
	}
}

// A command's slot in the backlog is free once it is processed, before its
// answer reaches the client: a client that waits for each answer never
// meets backpressure, however small the limit (CI once saw a job
// activation after a creation rejected, the creation's slot still held).
func TestAnsweredCommandsHoldNoSlot(t *testing.T) {
	s := startSim(t, Config{Partitions: 1, BacklogLimit: 1})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 1, "a"))
	for i := range 300 {
		if _, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(context.Background()); err != nil {
			t.Fatalf("creation %d, one at a time: %v", i, err)
		}
		if _, err := c.NewActivateJobsCommand().JobType("a").MaxJobsToActivate(1).Timeout(time.Minute).Send(context.Background()); err != nil {
			t.Fatalf("activation %d, one at a time: %v", i, err)
		}
	}
}
