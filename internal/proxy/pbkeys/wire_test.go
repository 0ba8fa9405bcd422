package pbkeys

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
)

// The frame front rewrites keys on the wire; the grpc front on decoded
// messages. Both must give the same message for every request and
// response that carries keys, nested ones included, and fail alike.
func TestWireRewriteMatchesDecodedRewrite(t *testing.T) {
	slotted := keyslot.With(1<<51|42, 3)
	other := keyslot.With(2<<51|7, 5)
	stamp := func(_ protoreflect.FieldDescriptor, k int64) (int64, error) { return keyslot.With(k, 4), nil }
	strip := func(_ protoreflect.FieldDescriptor, k int64) (int64, error) {
		if slot, raw := keyslot.Split(k); slot == 3 || slot == 0 {
			return raw, nil
		}
		return 0, errors.New("another shard's key")
	}
	for _, tc := range []struct {
		name    string
		msg     proto.Message
		fn      Func
		wantErr bool
	}{
		{"complete job", &pb.CompleteJobRequest{JobKey: slotted, Variables: `{"a":1}`}, strip, false},
		{"create response", &pb.CreateProcessInstanceResponse{ProcessDefinitionKey: 1<<51 | 9, ProcessInstanceKey: 2<<51 | 10, BpmnProcessId: "p", Version: 2}, stamp, false},
		{"no key", &pb.CreateProcessInstanceRequest{BpmnProcessId: "p", Version: -1, Variables: `{"x":"y"}`}, strip, false},
		{"negative and -1 keys", &pb.SetVariablesRequest{ElementInstanceKey: -1, Variables: "{}"}, strip, false},
		{"nested instructions", &pb.ModifyProcessInstanceRequest{ProcessInstanceKey: slotted,
			ActivateInstructions: []*pb.ModifyProcessInstanceRequest_ActivateInstruction{
				{ElementId: "a", AncestorElementInstanceKey: slotted, VariableInstructions: []*pb.ModifyProcessInstanceRequest_VariableInstruction{{Variables: "{}", ScopeId: "s"}}},
				{ElementId: "b", AncestorElementInstanceKey: -1}},
			TerminateInstructions: []*pb.ModifyProcessInstanceRequest_TerminateInstruction{{ElementInstanceKey: slotted}}}, strip, false},
		{"nested key of another shard", &pb.ModifyProcessInstanceRequest{ProcessInstanceKey: slotted,
			TerminateInstructions: []*pb.ModifyProcessInstanceRequest_TerminateInstruction{{ElementInstanceKey: other}}}, strip, true},
		{"migration plan", &pb.MigrateProcessInstanceRequest{ProcessInstanceKey: slotted,
			MigrationPlan: &pb.MigrateProcessInstanceRequest_MigrationPlan{TargetProcessDefinitionKey: slotted,
				MappingInstructions: []*pb.MigrateProcessInstanceRequest_MappingInstruction{{SourceElementId: "a", TargetElementId: "b"}}}}, strip, false},
		{"evaluated decision", &pb.EvaluateDecisionResponse{DecisionKey: 1<<51 | 3, DecisionRequirementsKey: 1<<51 | 4,
			EvaluatedDecisions: []*pb.EvaluatedDecision{{DecisionKey: 1<<51 | 5, MatchedRules: []*pb.MatchedDecisionRule{{RuleId: "r"}}}}}, stamp, false},
		{"decision evaluation keys (8.6+)", &pb.EvaluateDecisionResponse{DecisionKey: 1<<51 | 3, DecisionEvaluationKey: 1<<51 | 8, DecisionInstanceKey: 1<<51 | 8,
			EvaluatedDecisions: []*pb.EvaluatedDecision{{DecisionKey: 1<<51 | 5, DecisionEvaluationInstanceKey: "2251799813685256-1"},
				{DecisionEvaluationInstanceKey: "not-a-key"}, {DecisionEvaluationInstanceKey: ""}}}, stamp, false},
		{"task listener job (8.8+)", &pb.ActivatedJob{Key: 1<<51 | 1, Kind: pb.ActivatedJob_TASK_LISTENER,
			UserTask: &pb.UserTaskProperties{FormKey: proto.Int64(1<<51 | 2), UserTaskKey: proto.Int64(0), Assignee: proto.String("a")}}, stamp, false},
		{"optional key absent", &pb.ActivatedJob{Key: 1<<51 | 1, UserTask: &pb.UserTaskProperties{Priority: proto.Int32(50)}}, stamp, false},
		{"evaluate conditional (8.9)", &pb.EvaluateConditionalResponse{ProcessInstances: []*pb.ProcessInstanceReference{
			{ProcessDefinitionKey: 1<<51 | 2, ProcessInstanceKey: 2<<51 | 3}, {ProcessDefinitionKey: 1<<51 | 2, ProcessInstanceKey: 3<<51 | 4}}}, stamp, false},
		{"operation reference is not a key", &pb.CancelProcessInstanceRequest{ProcessInstanceKey: slotted, OperationReference: proto.Uint64(1<<51 | 3<<55)}, strip, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wire, err := proto.Marshal(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			decoded := proto.Clone(tc.msg)
			decErr := Rewrite(decoded.ProtoReflect(), tc.fn)
			out, wireErr := RewriteWire(nil, wire, tc.msg.ProtoReflect().Descriptor(), tc.fn)
			if (decErr != nil) != tc.wantErr || (wireErr != nil) != tc.wantErr {
				t.Fatalf("errors: decoded %v, wire %v; want an error %v", decErr, wireErr, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			got := tc.msg.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(out, got); err != nil {
				t.Fatalf("the rewritten message does not parse: %v", err)
			}
			if !proto.Equal(got, decoded) {
				t.Errorf("wire rewrite\n  %v\nwant\n  %v", got, decoded)
			}
		})
	}
}

// Malformed bytes are an error, never a panic or a message half copied.
func TestWireRewriteRefusesMalformed(t *testing.T) {
	md := (&pb.CompleteJobRequest{}).ProtoReflect().Descriptor()
	for _, in := range [][]byte{{0x08}, {0x08, 0xff}, {0x12, 0x05, 'a'}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if _, err := RewriteWire(nil, in, md, func(_ protoreflect.FieldDescriptor, k int64) (int64, error) { return k, nil }); !errors.Is(err, ErrMalformed) {
			t.Errorf("%x: %v, want ErrMalformed", in, err)
		}
		if _, err := WireInt64(in, 1); !errors.Is(err, ErrMalformed) {
			t.Errorf("WireInt64(%x): %v, want ErrMalformed", in, err)
		}
	}
}

func FuzzRewriteWire(f *testing.F) {
	seed, _ := proto.Marshal(&pb.ModifyProcessInstanceRequest{ProcessInstanceKey: keyslot.With(1<<51|1, 2),
		TerminateInstructions: []*pb.ModifyProcessInstanceRequest_TerminateInstruction{{ElementInstanceKey: 5}}})
	f.Add(seed)
	md := (&pb.ModifyProcessInstanceRequest{}).ProtoReflect().Descriptor()
	stamp := func(_ protoreflect.FieldDescriptor, k int64) (int64, error) { return keyslot.With(k, 7), nil }
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := RewriteWire(nil, in, md, stamp)
		if err != nil {
			return
		}
		// What parses must parse after, with the same keys stamped as
		// the decoded rewrite stamps them.
		want := &pb.ModifyProcessInstanceRequest{}
		if proto.Unmarshal(in, want) != nil {
			return
		}
		_ = Rewrite(want.ProtoReflect(), stamp)
		got := &pb.ModifyProcessInstanceRequest{}
		if err := proto.Unmarshal(out, got); err != nil {
			t.Fatalf("rewritten bytes do not parse: %v", err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("wire %v\nwant %v", got, want)
		}
	})
}
