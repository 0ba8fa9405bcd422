package restgateway

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// The hand-written encoding of a creation is the generated code's, byte
// for byte, and its answer reads as proto.Unmarshal reads it.
func TestCreateWire(t *testing.T) {
	for _, cr := range []*pb.CreateProcessInstanceRequest{
		{BpmnProcessId: "bench", Version: -1},
		{ProcessDefinitionKey: 2251799813685249 | 3<<58, Variables: `{"a":1}`, TenantId: "<default>"},
		{BpmnProcessId: "ünï", Version: 7, StartInstructions: []*pb.ProcessInstanceCreationStartInstruction{{ElementId: "t"}, {}}},
		{BpmnProcessId: "p", Version: -1, OperationReference: proto.Uint64(1 << 40), Tags: []string{"a", "b:c"}, BusinessId: proto.String("order-1")},
		{BpmnProcessId: "p", BusinessId: proto.String(""), OperationReference: proto.Uint64(0)},
		{},
	} {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(cr)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendCreateRequest(nil, cr); !bytes.Equal(got, want) {
			t.Errorf("%v:\n got %x\nwant %x", cr, got, want)
		}
	}
	resp := &pb.CreateProcessInstanceResponse{ProcessDefinitionKey: 1<<58 | 5, BpmnProcessId: "p", Version: 3, ProcessInstanceKey: 2<<58 | 9, TenantId: "<default>",
		Tags: []string{"x", "y"}, BusinessId: proto.String("b")}
	msg, _ := proto.Marshal(resp)
	unknown := protowire.AppendTag(nil, 99, protowire.BytesType)
	unknown = protowire.AppendString(unknown, "later field")
	for name, tc := range map[string]struct {
		msg []byte
		ok  bool
	}{
		"whole":                     {msg, true},
		"an unknown field after":    {append(append([]byte{}, msg...), unknown...), true},
		"cut short":                 {msg[:len(msg)-2], false},
		"a string not UTF-8":        {protowire.AppendString(protowire.AppendTag(nil, createdProcessID, protowire.BytesType), "\xff"), false},
		"a known field, other type": {protowire.AppendVarint(protowire.AppendTag(nil, createdProcessID, protowire.VarintType), 1), true},
	} {
		got, err := readCreated(tc.msg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: error %v, want ok=%v", name, err, tc.ok)
		}
		assertReadsAsProto(t, tc.msg, got, err)
	}
}

// assertReadsAsProto: readCreated and proto.Unmarshal agree on msg.
func assertReadsAsProto(t *testing.T, msg []byte, got createdInstance, err error) {
	t.Helper()
	var want pb.CreateProcessInstanceResponse
	werr := proto.Unmarshal(msg, &want)
	if (err == nil) != (werr == nil) {
		t.Fatalf("%x: readCreated says %v, proto.Unmarshal %v", msg, err, werr)
	}
	if err != nil {
		return
	}
	if got.ProcessDefinitionID != want.BpmnProcessId || int64(got.ProcessDefinitionKey) != want.ProcessDefinitionKey ||
		got.ProcessDefinitionVersion != want.Version || int64(got.ProcessInstanceKey) != want.ProcessInstanceKey || got.TenantID != want.TenantId ||
		!slices.Equal(got.Tags, want.Tags) || (got.BusinessID == nil) != (want.BusinessId == nil) || (got.BusinessID != nil && *got.BusinessID != *want.BusinessId) {
		t.Fatalf("%x: readCreated read %+v, proto.Unmarshal %v", msg, got, &want)
	}
}

func FuzzReadCreated(f *testing.F) {
	msg, _ := proto.Marshal(&pb.CreateProcessInstanceResponse{ProcessDefinitionKey: 5, BpmnProcessId: "p", Version: -1, ProcessInstanceKey: 9, TenantId: "t"})
	f.Add(msg)
	f.Fuzz(func(t *testing.T, msg []byte) {
		got, err := readCreated(msg)
		assertReadsAsProto(t, msg, got, err)
	})
}
