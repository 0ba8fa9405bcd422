package pbkeys

import (
	"testing"

	pb "github.com/camunda/zeebe/clients/go/v8/pkg/pb"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/shardctl/shardctl/internal/keyslot"
)

// Every int64 field named *Key in the gateway API must be rewritten: walk
// the descriptors so a client upgrade cannot add one silently.
func TestEveryKeyFieldIsRewritten(t *testing.T) {
	want := map[string]bool{
		"gateway_protocol.ActivatedJob.key": true, "gateway_protocol.ActivatedJob.processInstanceKey": true,
		"gateway_protocol.ActivatedJob.processDefinitionKey": true, "gateway_protocol.ActivatedJob.elementInstanceKey": true,
		"gateway_protocol.CreateProcessInstanceRequest.processDefinitionKey":  true,
		"gateway_protocol.CreateProcessInstanceResponse.processDefinitionKey": true,
		"gateway_protocol.CreateProcessInstanceResponse.processInstanceKey":   true,
		"gateway_protocol.CancelProcessInstanceRequest.processInstanceKey":    true,
		"gateway_protocol.CompleteJobRequest.jobKey":                          true, "gateway_protocol.FailJobRequest.jobKey": true,
		"gateway_protocol.ThrowErrorRequest.jobKey": true, "gateway_protocol.UpdateJobRetriesRequest.jobKey": true,
		"gateway_protocol.UpdateJobTimeoutRequest.jobKey": true, "gateway_protocol.SetVariablesRequest.elementInstanceKey": true,
		"gateway_protocol.SetVariablesResponse.key": true, "gateway_protocol.ResolveIncidentRequest.incidentKey": true,
		"gateway_protocol.DeployResourceResponse.key": true, "gateway_protocol.DeployProcessResponse.key": true,
		"gateway_protocol.ProcessMetadata.processDefinitionKey": true, "gateway_protocol.PublishMessageResponse.key": true,
		"gateway_protocol.BroadcastSignalResponse.key": true, "gateway_protocol.DeleteResourceRequest.resourceKey": true,
		"gateway_protocol.ModifyProcessInstanceRequest.processInstanceKey":                             true,
		"gateway_protocol.ModifyProcessInstanceRequest.ActivateInstruction.ancestorElementInstanceKey": true,
		"gateway_protocol.ModifyProcessInstanceRequest.TerminateInstruction.elementInstanceKey":        true,
		"gateway_protocol.MigrateProcessInstanceRequest.processInstanceKey":                            true,
		"gateway_protocol.MigrateProcessInstanceRequest.MigrationPlan.targetProcessDefinitionKey":      true,
		"gateway_protocol.EvaluateDecisionRequest.decisionKey":                                         true,
		"gateway_protocol.EvaluateDecisionResponse.decisionKey":                                        true,
		"gateway_protocol.EvaluateDecisionResponse.decisionRequirementsKey":                            true,
		"gateway_protocol.EvaluatedDecision.decisionKey":                                               true,
		"gateway_protocol.DecisionMetadata.decisionKey":                                                true, "gateway_protocol.DecisionMetadata.decisionRequirementsKey": true,
		"gateway_protocol.DecisionRequirementsMetadata.decisionRequirementsKey":         true,
		"gateway_protocol.FormMetadata.formKey":                                         true,
		"gateway_protocol.CreateProcessInstanceWithResultResponse.processDefinitionKey": true,
		"gateway_protocol.CreateProcessInstanceWithResultResponse.processInstanceKey":   true,
	}
	found := map[string]bool{}
	protoregistry.GlobalFiles.RangeFilesByPackage("gateway_protocol", func(fd protoreflect.FileDescriptor) bool {
		var walk func(protoreflect.MessageDescriptors)
		walk = func(ms protoreflect.MessageDescriptors) {
			for i := 0; i < ms.Len(); i++ {
				md := ms.Get(i)
				for _, f := range planFor(md).keys {
					found[string(f.FullName())] = true
				}
				walk(md.Messages())
			}
		}
		walk(fd.Messages())
		return true
	})
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
