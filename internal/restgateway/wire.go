package restgateway

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// A creation's messages written and read by hand, for Options.Unary:
// the field numbers of gateway.proto's CreateProcessInstanceRequest and
// CreateProcessInstanceResponse. TestCreateWire holds them to the
// generated code's encoding.
const (
	createDefinitionKey  = 1
	createProcessID      = 2
	createVersion        = 3
	createVariables      = 4
	createStart          = 5
	createTenant         = 6
	createOperationRef   = 7
	createTags           = 9
	createBusinessID     = 10
	startElementID       = 1
	createdDefinitionKey = 1
	createdProcessID     = 2
	createdVersion       = 3
	createdInstanceKey   = 4
	createdTenant        = 5
	createdTags          = 6
	createdBusinessID    = 7
)

// appendCreateRequest appends cr as proto.Marshal encodes it.
func appendCreateRequest(b []byte, cr *pb.CreateProcessInstanceRequest) []byte {
	if cr.ProcessDefinitionKey != 0 {
		b = protowire.AppendTag(b, createDefinitionKey, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(cr.ProcessDefinitionKey))
	}
	b = appendStringField(b, createProcessID, cr.BpmnProcessId)
	if cr.Version != 0 {
		b = protowire.AppendTag(b, createVersion, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(cr.Version)))
	}
	b = appendStringField(b, createVariables, cr.Variables)
	for _, s := range cr.StartInstructions {
		b = protowire.AppendTag(b, createStart, protowire.BytesType)
		n := 0
		if s.ElementId != "" {
			n = protowire.SizeTag(startElementID) + protowire.SizeBytes(len(s.ElementId))
		}
		b = protowire.AppendVarint(b, uint64(n))
		b = appendStringField(b, startElementID, s.ElementId)
	}
	b = appendStringField(b, createTenant, cr.TenantId)
	if cr.OperationReference != nil {
		b = protowire.AppendTag(b, createOperationRef, protowire.VarintType)
		b = protowire.AppendVarint(b, *cr.OperationReference)
	}
	for _, t := range cr.Tags {
		b = protowire.AppendTag(b, createTags, protowire.BytesType)
		b = protowire.AppendString(b, t)
	}
	if cr.BusinessId != nil { // optional: sent even when empty
		b = protowire.AppendTag(b, createBusinessID, protowire.BytesType)
		b = protowire.AppendString(b, *cr.BusinessId)
	}
	return b
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

var errCreatedMessage = errors.New("a malformed CreateProcessInstanceResponse")

// readCreated reads a CreateProcessInstanceResponse as proto.Unmarshal
// does: the last of a repeated field wins, unknown fields are skipped,
// and a string must be UTF-8.
func readCreated(msg []byte) (createdInstance, error) {
	var c createdInstance
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 || num > protowire.MaxValidNumber {
			return c, errCreatedMessage
		}
		msg = msg[n:]
		switch {
		case typ == protowire.VarintType && (num == createdDefinitionKey || num == createdVersion || num == createdInstanceKey):
			v, n := protowire.ConsumeVarint(msg)
			if n < 0 {
				return c, errCreatedMessage
			}
			msg = msg[n:]
			switch num {
			case createdDefinitionKey:
				c.ProcessDefinitionKey = Key(int64(v))
			case createdVersion:
				c.ProcessDefinitionVersion = int32(v)
			default:
				c.ProcessInstanceKey = Key(int64(v))
			}
		case typ == protowire.BytesType && (num == createdProcessID || num == createdTenant || num == createdTags || num == createdBusinessID):
			v, n := protowire.ConsumeBytes(msg)
			if n < 0 || !utf8.Valid(v) {
				return c, errCreatedMessage
			}
			msg = msg[n:]
			switch num {
			case createdProcessID:
				c.ProcessDefinitionID = string(v)
			case createdTenant:
				c.TenantID = string(v)
			case createdTags:
				c.Tags = append(c.Tags, string(v))
			default:
				id := string(v)
				c.BusinessID = &id
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, msg)
			if n < 0 {
				return c, errCreatedMessage
			}
			msg = msg[n:]
		}
	}
	return c, nil
}
