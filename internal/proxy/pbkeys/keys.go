package pbkeys

import (
	"strings"
	"sync"

	pb "github.com/camunda/zeebe/clients/go/v8/pkg/pb"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/shardctl/shardctl/internal/keyslot"
)

// keyPlan lists where a message type holds keys: int64 fields whose name
// is "key" or ends in "Key" (the gateway API's convention), and the
// message fields to search below.
type keyPlan struct {
	keys   []protoreflect.FieldDescriptor
	nested []protoreflect.FieldDescriptor
}

var plans sync.Map // protoreflect.FullName -> *keyPlan

func isKeyField(fd protoreflect.FieldDescriptor) bool {
	if fd.Kind() != protoreflect.Int64Kind || fd.IsList() || fd.IsMap() {
		return false
	}
	name := string(fd.Name())
	return name == "key" || strings.HasSuffix(name, "Key")
}

func planFor(md protoreflect.MessageDescriptor) *keyPlan {
	if p, ok := plans.Load(md.FullName()); ok {
		return p.(*keyPlan)
	}
	p := &keyPlan{}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		switch {
		case isKeyField(fd):
			p.keys = append(p.keys, fd)
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap():
			p.nested = append(p.nested, fd)
		}
	}
	plans.Store(md.FullName(), p)
	return p
}

// Rewrite applies fn to every key field of m and of the messages it
// holds. fn returns the new key and whether it may be used.
func Rewrite(m protoreflect.Message, fn func(fd protoreflect.FieldDescriptor, key int64) (int64, error)) error {
	plan := planFor(m.Descriptor())
	for _, fd := range plan.keys {
		v := m.Get(fd).Int()
		nv, err := fn(fd, v)
		if err != nil {
			return err
		}
		if nv != v {
			m.Set(fd, protoreflect.ValueOfInt64(nv))
		}
	}
	for _, fd := range plan.nested {
		if fd.IsList() {
			l := m.Get(fd).List()
			for i := 0; i < l.Len(); i++ {
				if err := Rewrite(l.Get(i).Message(), fn); err != nil {
					return err
				}
			}
			continue
		}
		if m.Has(fd) {
			if err := Rewrite(m.Get(fd).Message(), fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stamp writes slot into every key of a response. The hottest
// responses are stamped field by field; the rest by reflection.
func Stamp(m protoreflect.Message, slot int) {
	switch r := m.Interface().(type) {
	case *pb.CreateProcessInstanceResponse:
		r.ProcessDefinitionKey = keyslot.With(r.ProcessDefinitionKey, slot)
		r.ProcessInstanceKey = keyslot.With(r.ProcessInstanceKey, slot)
		return
	case *pb.CompleteJobResponse, *pb.FailJobResponse:
		return // no keys
	case *pb.ActivatedJob:
		r.Key = keyslot.With(r.Key, slot)
		r.ProcessInstanceKey = keyslot.With(r.ProcessInstanceKey, slot)
		r.ProcessDefinitionKey = keyslot.With(r.ProcessDefinitionKey, slot)
		r.ElementInstanceKey = keyslot.With(r.ElementInstanceKey, slot)
		return
	}
	_ = Rewrite(m, func(_ protoreflect.FieldDescriptor, k int64) (int64, error) { return keyslot.With(k, slot), nil })
}
