package pbkeys

import (
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
)

// Every int64 field named *Key in the gateway API must be rewritten: walk
// the descriptors so a client upgrade cannot add one silently.
func TestEveryKeyFieldIsRewritten(t *testing.T) {
	want := map[string]bool{
		"shardctl.gateway.ActivatedJob.key": true, "shardctl.gateway.ActivatedJob.processInstanceKey": true,
		"shardctl.gateway.ActivatedJob.processDefinitionKey": true, "shardctl.gateway.ActivatedJob.elementInstanceKey": true,
		"shardctl.gateway.CreateProcessInstanceRequest.processDefinitionKey":  true,
		"shardctl.gateway.CreateProcessInstanceResponse.processDefinitionKey": true,
		"shardctl.gateway.CreateProcessInstanceResponse.processInstanceKey":   true,
		"shardctl.gateway.CancelProcessInstanceRequest.processInstanceKey":    true,
		"shardctl.gateway.CompleteJobRequest.jobKey":                          true, "shardctl.gateway.FailJobRequest.jobKey": true,
		"shardctl.gateway.ThrowErrorRequest.jobKey": true, "shardctl.gateway.UpdateJobRetriesRequest.jobKey": true,
		"shardctl.gateway.UpdateJobTimeoutRequest.jobKey": true, "shardctl.gateway.SetVariablesRequest.elementInstanceKey": true,
		"shardctl.gateway.SetVariablesResponse.key": true, "shardctl.gateway.ResolveIncidentRequest.incidentKey": true,
		"shardctl.gateway.DeployResourceResponse.key": true, "shardctl.gateway.DeployProcessResponse.key": true,
		"shardctl.gateway.ProcessMetadata.processDefinitionKey": true, "shardctl.gateway.PublishMessageResponse.key": true,
		"shardctl.gateway.BroadcastSignalResponse.key": true, "shardctl.gateway.DeleteResourceRequest.resourceKey": true,
		"shardctl.gateway.ModifyProcessInstanceRequest.processInstanceKey":                             true,
		"shardctl.gateway.ModifyProcessInstanceRequest.ActivateInstruction.ancestorElementInstanceKey": true,
		"shardctl.gateway.ModifyProcessInstanceRequest.TerminateInstruction.elementInstanceKey":        true,
		"shardctl.gateway.MigrateProcessInstanceRequest.processInstanceKey":                            true,
		"shardctl.gateway.MigrateProcessInstanceRequest.MigrationPlan.targetProcessDefinitionKey":      true,
		"shardctl.gateway.EvaluateDecisionRequest.decisionKey":                                         true,
		"shardctl.gateway.EvaluateDecisionResponse.decisionKey":                                        true,
		"shardctl.gateway.EvaluateDecisionResponse.decisionRequirementsKey":                            true,
		"shardctl.gateway.EvaluatedDecision.decisionKey":                                               true,
		"shardctl.gateway.DecisionMetadata.decisionKey":                                                true, "shardctl.gateway.DecisionMetadata.decisionRequirementsKey": true,
		"shardctl.gateway.DecisionRequirementsMetadata.decisionRequirementsKey":         true,
		"shardctl.gateway.FormMetadata.formKey":                                         true,
		"shardctl.gateway.CreateProcessInstanceWithResultResponse.processDefinitionKey": true,
		"shardctl.gateway.CreateProcessInstanceWithResultResponse.processInstanceKey":   true,
		// Since 8.5: a task listener's user task, the decision evaluation's
		// keys, what EvaluateConditional (8.9) takes and starts.
		"shardctl.gateway.UserTaskProperties.formKey": true, "shardctl.gateway.UserTaskProperties.userTaskKey": true,
		"shardctl.gateway.EvaluateDecisionResponse.decisionInstanceKey":    true,
		"shardctl.gateway.EvaluateDecisionResponse.decisionEvaluationKey":  true,
		"shardctl.gateway.EvaluatedDecision.decisionEvaluationInstanceKey": true, // "<key>-<n>"
		"shardctl.gateway.EvaluateConditionalRequest.processDefinitionKey": true,
		"shardctl.gateway.ProcessInstanceReference.processDefinitionKey":   true,
		"shardctl.gateway.ProcessInstanceReference.processInstanceKey":     true,
	}
	found := map[string]bool{}
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			md := ms.Get(i)
			for _, f := range append(planFor(md).keys, planFor(md).compound...) {
				found[string(f.FullName())] = true
			}
			walk(md.Messages())
		}
	}
	walk(pb.File_gatewaypb_gateway_proto.Messages()) // the current API, 8.10's
	if len(found) < len(want)/2 {
		t.Fatalf("found %d key fields: the walk did not reach the gateway API", len(found))
	}
	for k := range want {
		if !found[k] {
			t.Errorf("key field %s is not rewritten", k)
		}
	}
	for k := range found {
		if !want[k] {
			t.Errorf("field %s is rewritten but not in the checked list: add it after checking it is a key", k)
		}
	}
	// And the rewrite reaches nested messages.
	req := &pb.ModifyProcessInstanceRequest{ProcessInstanceKey: keyslot.With(5, 3),
		ActivateInstructions: []*pb.ModifyProcessInstanceRequest_ActivateInstruction{{AncestorElementInstanceKey: keyslot.With(7, 3)}}}
	_ = Rewrite(req.ProtoReflect(), func(_ protoreflect.FieldDescriptor, k int64) (int64, error) {
		_, raw := keyslot.Split(k)
		return raw, nil
	})
	if req.ProcessInstanceKey != 5 || req.ActivateInstructions[0].AncestorElementInstanceKey != 7 {
		t.Errorf("rewritten: %v", req)
	}
}

// Stamp's hand-written cases must stamp what the reflective walk stamps,
// the keys of 8.8's task-listener jobs included.
func TestStampFastPathsMatchTheWalk(t *testing.T) {
	formKey, taskKey := int64(1<<51|77), int64(1<<51|78)
	for _, m := range []proto.Message{
		&pb.ActivatedJob{Key: 1<<51 | 1, ProcessInstanceKey: 1<<51 | 2, ProcessDefinitionKey: 1<<51 | 3, ElementInstanceKey: 1<<51 | 4,
			Kind: pb.ActivatedJob_TASK_LISTENER, ListenerEventType: pb.ActivatedJob_COMPLETING, Tags: []string{"t"},
			UserTask: &pb.UserTaskProperties{FormKey: &formKey, UserTaskKey: &taskKey}},
		&pb.ActivatedJob{Key: 1<<51 | 1, UserTask: &pb.UserTaskProperties{}},
		&pb.CreateProcessInstanceResponse{ProcessDefinitionKey: 1<<51 | 1, ProcessInstanceKey: 2<<51 | 2, Tags: []string{"a"}},
	} {
		fast, walked := proto.Clone(m), proto.Clone(m)
		Stamp(fast.ProtoReflect(), 6)
		_ = Rewrite(walked.ProtoReflect(), func(_ protoreflect.FieldDescriptor, k int64) (int64, error) { return keyslot.With(k, 6), nil })
		if !proto.Equal(fast, walked) {
			t.Errorf("Stamp gave\n  %v\nthe walk\n  %v", fast, walked)
		}
		if proto.Equal(fast, m) {
			t.Errorf("Stamp left %v as it was", m)
		}
	}
}

// A decision evaluation instance's key is its evaluation's key and an
// index: the key part carries the slot, the index stays, anything else
// is left as the shard wrote it.
func TestCompoundKeyCarriesTheSlot(t *testing.T) {
	raw := int64(2251799813685256)
	for _, tc := range []struct{ in, want string }{
		{"2251799813685256-1", strconv.FormatInt(keyslot.With(raw, 4), 10) + "-1"},
		{"2251799813685256-12", strconv.FormatInt(keyslot.With(raw, 4), 10) + "-12"},
		{"2251799813685256", "2251799813685256"},
		{"x-1", "x-1"},
		{"", ""},
	} {
		m := &pb.EvaluatedDecision{DecisionEvaluationInstanceKey: tc.in}
		Stamp(m.ProtoReflect(), 4)
		if m.DecisionEvaluationInstanceKey != tc.want {
			t.Errorf("%q stamped: %q, want %q", tc.in, m.DecisionEvaluationInstanceKey, tc.want)
		}
	}
}
