package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/pbkeys"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// received records the requests a simulator's gateway received, as
// marshalled, by method; and plays what a task-listener job and a
// scaling cluster look like (the simulator has neither): activated jobs
// get 8.8's kind, listener event and user task properties, and the
// topology an INACTIVE and a DEAD partition.
type received struct {
	mu   sync.Mutex
	reqs map[string][][]byte
}

// Raw (shard-issued) keys the played user task carries.
const playedFormKey, playedUserTaskKey = 1<<51 | 4001, 1<<51 | 4002

func (r *received) note(method string, m any) {
	b, err := proto.Marshal(m.(proto.Message))
	if err != nil {
		panic(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs[method] = append(r.reqs[method], b)
}

func (r *received) last(t *testing.T, method string) []byte {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.reqs[method]
	if len(got) == 0 {
		t.Fatalf("the simulator received no %s", method)
	}
	return got[len(got)-1]
}

func (r *received) options() []grpc.ServerOption {
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		r.note(info.FullMethod, req)
		resp, err := h(ctx, req)
		if t, ok := resp.(*pb.TopologyResponse); ok && err == nil {
			parts := t.Brokers[0].Partitions
			parts[1].Role = pb.Partition_INACTIVE
			parts[2].Health = pb.Partition_DEAD
		}
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, &playedStream{ServerStream: ss, r: r, method: info.FullMethod})
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream)}
}

type playedStream struct {
	grpc.ServerStream
	r      *received
	method string
}

func (s *playedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.r.note(s.method, m)
	}
	return err
}

func (s *playedStream) SendMsg(m any) error {
	if resp, ok := m.(*pb.ActivateJobsResponse); ok {
		for _, j := range resp.Jobs {
			j.Kind, j.ListenerEventType = pb.ActivatedJob_TASK_LISTENER, pb.ActivatedJob_COMPLETING
			j.UserTask = &pb.UserTaskProperties{Assignee: proto.String("ada"), CandidateGroups: []string{"ops"},
				FormKey: proto.Int64(playedFormKey), UserTaskKey: proto.Int64(playedUserTaskKey), Priority: proto.Int32(60)}
		}
	}
	return s.ServerStream.SendMsg(m)
}

// What came after 8.5 in the gateway API reaches the shard and the
// client unchanged through either front, with every key in it carrying
// the shard's slot on the client's side and the shard's own key on the
// shard's: each request the simulator received is the client's, byte
// for byte, once its keys are the shard's.
func TestFieldsSince85PassThrough(t *testing.T) {
	for _, front := range []string{route.FrontFrames, route.FrontGRPC} {
		t.Run(front, func(t *testing.T) { fieldsSince85(t, front) })
	}
}

func fieldsSince85(t *testing.T, front string) {
	rec := &received{reqs: map[string][][]byte{}}
	shard := simtest.Start(t, sim.Config{Partitions: 3, GRPCOptions: rec.options()})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs([]*sim.Sim{shard}), Front: front})
	const slot = 1
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	ctx, cancel := context.WithTimeout(context.Background(), budget.Of(30*time.Second))
	defer cancel()

	// asSent checks that the simulator's last request of method is req
	// with the shard's keys.
	asSent := func(method string, req proto.Message) {
		t.Helper()
		want := proto.Clone(req)
		if err := pbkeys.Rewrite(want.ProtoReflect(), func(_ protoreflect.FieldDescriptor, k int64) (int64, error) {
			_, raw := keyslot.Split(k)
			return raw, nil
		}); err != nil {
			t.Fatal(err)
		}
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.last(t, "/gateway_protocol.Gateway/"+method); !bytes.Equal(got, b) {
			t.Errorf("%s: the simulator received\n  %x\nthe client sent (with the shard's keys)\n  %x", method, got, b)
		}
	}
	stamped := func(k int64) bool { s, _ := keyslot.Split(k); return s == slot }

	conditional := []byte(load.DefinitionsHead + `<bpmn:process id="big-order" isExecutable="true">
<bpmn:startEvent id="when"><bpmn:conditionalEventDefinition><bpmn:condition>= amount &gt; 100</bpmn:condition></bpmn:conditionalEventDefinition></bpmn:startEvent>
<bpmn:endEvent id="done"/><bpmn:sequenceFlow id="f" sourceRef="when" targetRef="done"/></bpmn:process></bpmn:definitions>`)
	for _, r := range []*pb.Resource{{Name: "p.bpmn", Content: load.Process("p", "t")}, {Name: "q.bpmn", Content: load.Process("q")},
		{Name: "c.bpmn", Content: conditional}} {
		if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{r}}); err != nil {
			t.Fatal(err)
		}
	}

	create := &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1, Tags: []string{"region:eu", "vip"},
		BusinessId: proto.String("order-42"), OperationReference: proto.Uint64(7),
		RuntimeInstructions: []*pb.ProcessInstanceCreationRuntimeInstruction{{Instruction: &pb.ProcessInstanceCreationRuntimeInstruction_Terminate{
			Terminate: &pb.TerminateProcessInstanceInstruction{AfterElementId: "end"}}}}}
	created, err := gw.CreateProcessInstance(ctx, create)
	if err != nil {
		t.Fatal(err)
	}
	asSent("CreateProcessInstance", create)
	if !proto.Equal(&pb.CreateProcessInstanceResponse{Tags: created.Tags, BusinessId: created.BusinessId},
		&pb.CreateProcessInstanceResponse{Tags: create.Tags, BusinessId: create.BusinessId}) || !stamped(created.ProcessInstanceKey) {
		t.Errorf("created %v", created)
	}

	withResult := &pb.CreateProcessInstanceWithResultRequest{Request: &pb.CreateProcessInstanceRequest{BpmnProcessId: "q", Version: -1,
		Tags: []string{"batch"}, BusinessId: proto.String("")}, RequestTimeout: 10000}
	done, err := gw.CreateProcessInstanceWithResult(ctx, withResult)
	if err != nil {
		t.Fatal(err)
	}
	asSent("CreateProcessInstanceWithResult", withResult)
	if len(done.Tags) != 1 || done.Tags[0] != "batch" || done.BusinessId == nil || *done.BusinessId != "" {
		t.Errorf("with result: %v", done)
	}

	activate := &pb.ActivateJobsRequest{Type: "t", Worker: "w", Timeout: 60000, MaxJobsToActivate: 1, RequestTimeout: 5000}
	stream, err := gw.ActivateJobs(ctx, activate)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := stream.Recv()
	if err != nil || len(batch.Jobs) != 1 {
		t.Fatalf("activated %v, %v", batch, err)
	}
	job := batch.Jobs[0]
	u := job.GetUserTask()
	if len(job.Tags) != 2 || job.Tags[1] != "vip" || job.Kind != pb.ActivatedJob_TASK_LISTENER || job.ListenerEventType != pb.ActivatedJob_COMPLETING ||
		u.GetAssignee() != "ada" || u.GetPriority() != 60 || len(u.GetCandidateGroups()) != 1 ||
		u.GetFormKey() != keyslot.With(playedFormKey, slot) || u.GetUserTaskKey() != keyslot.With(playedUserTaskKey, slot) || !stamped(job.Key) {
		t.Errorf("the job as the client got it: %v", job)
	}

	timeout := &pb.UpdateJobTimeoutRequest{JobKey: job.Key, Timeout: 120000, OperationReference: proto.Uint64(8)}
	if _, err := gw.UpdateJobTimeout(ctx, timeout); err != nil {
		t.Fatal(err)
	}
	asSent("UpdateJobTimeout", timeout)
	retries := &pb.UpdateJobRetriesRequest{JobKey: job.Key, Retries: 4, OperationReference: proto.Uint64(9)}
	if _, err := gw.UpdateJobRetries(ctx, retries); err != nil {
		t.Fatal(err)
	}
	asSent("UpdateJobRetries", retries)
	setVars := &pb.SetVariablesRequest{ElementInstanceKey: created.ProcessInstanceKey, Variables: `{"x":1}`, OperationReference: proto.Uint64(10)}
	if _, err := gw.SetVariables(ctx, setVars); err != nil {
		t.Fatal(err)
	}
	asSent("SetVariables", setVars)
	complete := &pb.CompleteJobRequest{JobKey: job.Key, Variables: `{"ok":true}`, Result: &pb.JobResult{Denied: proto.Bool(false),
		Corrections: &pb.JobResultCorrections{Assignee: proto.String("grace"), CandidateUsers: &pb.StringList{Values: []string{"a", "b"}}, Priority: proto.Int32(70)},
		Type:        proto.String("userTask"), ActivateElements: []*pb.JobResultActivateElement{{ElementId: "x", Variables: "{}"}}}}
	if _, err := gw.CompleteJob(ctx, complete); err != nil {
		t.Fatal(err)
	}
	asSent("CompleteJob", complete)

	second, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1})
	if err != nil {
		t.Fatal(err)
	}
	cancelReq := &pb.CancelProcessInstanceRequest{ProcessInstanceKey: second.ProcessInstanceKey, OperationReference: proto.Uint64(11)}
	if _, err := gw.CancelProcessInstance(ctx, cancelReq); err != nil {
		t.Fatal(err)
	}
	asSent("CancelProcessInstance", cancelReq)

	// What the simulator refuses still reaches it as sent.
	noIncident := keyslot.With(1<<51|999999, slot)
	for method, call := range map[string]struct {
		req  proto.Message
		send func() error
	}{
		"ResolveIncident": {&pb.ResolveIncidentRequest{IncidentKey: noIncident, OperationReference: proto.Uint64(12)}, nil},
		"DeleteResource":  {&pb.DeleteResourceRequest{ResourceKey: created.ProcessDefinitionKey, OperationReference: proto.Uint64(13)}, nil},
		"ModifyProcessInstance": {&pb.ModifyProcessInstanceRequest{ProcessInstanceKey: created.ProcessInstanceKey, OperationReference: proto.Uint64(14),
			TerminateInstructions: []*pb.ModifyProcessInstanceRequest_TerminateInstruction{{ElementInstanceKey: created.ProcessInstanceKey}}}, nil},
		"MigrateProcessInstance": {&pb.MigrateProcessInstanceRequest{ProcessInstanceKey: created.ProcessInstanceKey, OperationReference: proto.Uint64(15),
			MigrationPlan: &pb.MigrateProcessInstanceRequest_MigrationPlan{TargetProcessDefinitionKey: created.ProcessDefinitionKey}}, nil},
	} {
		var err error
		switch req := call.req.(type) {
		case *pb.ResolveIncidentRequest:
			_, err = gw.ResolveIncident(ctx, req)
		case *pb.DeleteResourceRequest:
			_, err = gw.DeleteResource(ctx, req)
		case *pb.ModifyProcessInstanceRequest:
			_, err = gw.ModifyProcessInstance(ctx, req)
		case *pb.MigrateProcessInstanceRequest:
			_, err = gw.MigrateProcessInstance(ctx, req)
		}
		if c := status.Code(err); c != codes.NotFound && c != codes.Unimplemented {
			t.Errorf("%s: %v, want the simulator's refusal", method, err)
		}
		asSent(method, call.req)
	}

	eval := &pb.EvaluateConditionalRequest{Variables: `{"amount":150}`}
	started, err := gw.EvaluateConditional(ctx, eval)
	if err != nil {
		t.Fatal(err)
	}
	asSent("EvaluateConditional", eval)
	if len(started.ProcessInstances) != 1 || !stamped(started.ProcessInstances[0].ProcessInstanceKey) || !stamped(started.ProcessInstances[0].ProcessDefinitionKey) {
		t.Errorf("EvaluateConditional started %v", started)
	}
	if none, err := gw.EvaluateConditional(ctx, &pb.EvaluateConditionalRequest{Variables: `{"amount":50}`}); err != nil || len(none.ProcessInstances) != 0 {
		t.Errorf("a condition that does not hold started %v, %v", none, err)
	}

	topo, err := gw.Topology(ctx, &pb.TopologyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	parts := topo.Brokers[0].Partitions
	if parts[1].Role != pb.Partition_INACTIVE || parts[2].Health != pb.Partition_DEAD || topo.GatewayVersion != sim.DefaultVersion.Release() {
		t.Errorf("topology through the proxy: %v", topo)
	}
}

// A method the proxy does not know (a gateway newer than this proxy) is
// refused at once with UNIMPLEMENTED naming it, on either front: it is
// never sent to a shard that might not have it, nor left to hang.
func TestUnknownMethodIsRefusedByName(t *testing.T) {
	shard := simtest.Start(t, sim.Config{Partitions: 1})
	for _, front := range []string{route.FrontFrames, route.FrontGRPC} {
		t.Run(front, func(t *testing.T) {
			p := startProxy(t, Config{Shards: simtest.ShardConfigs([]*sim.Sim{shard}), Front: front})
			ctx, cancel := context.WithTimeout(context.Background(), budget.Of(10*time.Second))
			defer cancel()
			err := dial(t, p.Addr().String()).Invoke(ctx, "/gateway_protocol.Gateway/EvaluateFutureThing", &pb.TopologyRequest{}, &pb.TopologyResponse{})
			if st := status.Convert(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "EvaluateFutureThing") {
				t.Errorf("%v, want UNIMPLEMENTED naming the method", err)
			}
		})
	}
}

// EvaluateConditional starts instances, so the proxy places it as it
// places a creation, over REST (8.9's /v2/conditionals/evaluation) and
// gRPC alike: the instances land on several shards, each with its
// definition's key from the same shard; one naming a definition key
// starts on that key's shard.
func TestConditionalStartsArePlaced(t *testing.T) {
	var shards []*sim.Sim
	for range 3 {
		shards = append(shards, simtest.Start(t, sim.Config{Partitions: 1, RESTListen: "127.0.0.1:0"}))
	}
	p, base := startRESTProxy(t, shards)
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	ctx, cancel := context.WithTimeout(context.Background(), budget.Of(30*time.Second))
	defer cancel()
	conditional := []byte(load.DefinitionsHead + `<bpmn:process id="big-order" isExecutable="true">
<bpmn:startEvent id="when"><bpmn:conditionalEventDefinition><bpmn:condition>= amount &gt; 100</bpmn:condition></bpmn:conditionalEventDefinition></bpmn:startEvent>
<bpmn:endEvent id="done"/><bpmn:sequenceFlow id="f" sourceRef="when" targetRef="done"/></bpmn:process></bpmn:definitions>`)
	if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "c.bpmn", Content: conditional}}}); err != nil {
		t.Fatal(err)
	}
	slots := map[int]int{}
	var someDefinition string
	for range 30 {
		r := restCall(t, http.MethodPost, base+"/v2/conditionals/evaluation", "application/json", []byte(`{"variables":{"amount":500}}`))
		var out struct {
			ProcessInstances []struct{ ProcessDefinitionKey, ProcessInstanceKey string }
		}
		if err := json.Unmarshal(r.body, &out); err != nil || r.status != http.StatusOK || len(out.ProcessInstances) != 1 {
			t.Fatalf("evaluation: %d %s", r.status, r.body)
		}
		ref := out.ProcessInstances[0]
		slot := slotOf(t, ref.ProcessInstanceKey)
		if slotOf(t, ref.ProcessDefinitionKey) != slot {
			t.Errorf("instance %s and its definition %s from different shards", ref.ProcessInstanceKey, ref.ProcessDefinitionKey)
		}
		slots[slot]++
		someDefinition = ref.ProcessDefinitionKey
	}
	if len(slots) < 2 {
		t.Errorf("30 evaluations all started on one shard: %v", slots)
	}
	defKey, _ := strconv.ParseInt(someDefinition, 10, 64)
	want, _ := keyslot.Split(defKey)
	for range 5 {
		started, err := gw.EvaluateConditional(ctx, &pb.EvaluateConditionalRequest{ProcessDefinitionKey: defKey, Variables: `{"amount":500}`})
		if err != nil || len(started.ProcessInstances) != 1 {
			t.Fatalf("by definition key: %v, %v", started, err)
		}
		if got, _ := keyslot.Split(started.ProcessInstances[0].ProcessInstanceKey); got != want {
			t.Errorf("by definition key of slot %d: started on slot %d", want, got)
		}
	}
}
