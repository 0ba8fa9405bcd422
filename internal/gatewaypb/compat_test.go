package gatewaypb_test

import (
	"testing"

	old "github.com/camunda/zeebe/clients/go/v8/pkg/pb"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shardctl/shardctl/internal/gatewaypb"
)

// The Zeebe Go client's 8.5 API must be a subset of this one on the
// wire: every message and field by number, kind and cardinality, every
// enum value, every method with its streaming, under the same service
// name. A field renumbered or retyped in gateway.proto fails here.
func TestEvery85FieldAndMethodIsHereOnTheSameWire(t *testing.T) {
	oldFile, newFile := old.File_gateway_proto, gatewaypb.File_gatewaypb_gateway_proto
	oldMsgs, newMsgs := oldFile.Messages(), newFile.Messages()
	for i := 0; i < oldMsgs.Len(); i++ {
		compareMessage(t, oldMsgs.Get(i), newMsgs.ByName(oldMsgs.Get(i).Name()))
	}
	oldSvc, newSvc := oldFile.Services().ByName("Gateway"), newFile.Services().ByName("Gateway")
	if newSvc == nil {
		t.Fatal("no Gateway service")
	}
	for i := 0; i < oldSvc.Methods().Len(); i++ {
		om := oldSvc.Methods().Get(i)
		nm := newSvc.Methods().ByName(om.Name())
		switch {
		case nm == nil:
			t.Errorf("method %s is missing", om.Name())
		case nm.IsStreamingClient() != om.IsStreamingClient() || nm.IsStreamingServer() != om.IsStreamingServer():
			t.Errorf("method %s streams differently", om.Name())
		case nm.Input().Name() != om.Input().Name() || nm.Output().Name() != om.Output().Name():
			t.Errorf("method %s takes %s and answers %s, 8.5: %s and %s", om.Name(), nm.Input().Name(), nm.Output().Name(), om.Input().Name(), om.Output().Name())
		}
	}
	if got, want := gatewaypb.Gateway_ServiceDesc.ServiceName, string(oldSvc.FullName()); got != want {
		t.Errorf("service name %q, clients dial %q", got, want)
	}
	if got := gatewaypb.Gateway_CreateProcessInstance_FullMethodName; got != "/gateway_protocol.Gateway/CreateProcessInstance" {
		t.Errorf("method path %q", got)
	}
}

func compareMessage(t *testing.T, om, nm protoreflect.MessageDescriptor) {
	t.Helper()
	if nm == nil {
		t.Errorf("message %s is missing", om.FullName())
		return
	}
	for i := 0; i < om.Fields().Len(); i++ {
		of := om.Fields().Get(i)
		nf := nm.Fields().ByNumber(of.Number())
		switch {
		case nf == nil:
			t.Errorf("%s.%s (%d) is missing", om.Name(), of.Name(), of.Number())
		case nf.Name() != of.Name() || nf.Kind() != of.Kind() || nf.Cardinality() != of.Cardinality() || nf.HasPresence() != of.HasPresence():
			t.Errorf("%s field %d: %s %v %v, 8.5: %s %v %v", om.Name(), of.Number(), nf.Name(), nf.Kind(), nf.Cardinality(), of.Name(), of.Kind(), of.Cardinality())
		case of.Message() != nil:
			if nf.Message() == nil || nf.Message().Name() != of.Message().Name() {
				t.Errorf("%s.%s holds another message", om.Name(), of.Name())
			}
		}
	}
	for i := 0; i < om.Enums().Len(); i++ {
		oe := om.Enums().Get(i)
		ne := nm.Enums().ByName(oe.Name())
		if ne == nil {
			t.Errorf("enum %s is missing", oe.FullName())
			continue
		}
		for j := 0; j < oe.Values().Len(); j++ {
			ov := oe.Values().Get(j)
			if nv := ne.Values().ByNumber(ov.Number()); nv == nil || nv.Name() != ov.Name() {
				t.Errorf("enum %s value %d is not %s", oe.Name(), ov.Number(), ov.Name())
			}
		}
	}
	for i := 0; i < om.Messages().Len(); i++ {
		compareMessage(t, om.Messages().Get(i), nm.Messages().ByName(om.Messages().Get(i).Name()))
	}
}
