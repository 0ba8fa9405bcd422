package pbkeys

import (
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
)

// keyPlan lists where a message type holds keys: int64 fields whose name
// is "key" or ends in "Key" (the gateway API's convention), string
// fields that hold a key with a suffix (compoundKeys), and the message
// fields to search below.
type keyPlan struct {
	keys     []protoreflect.FieldDescriptor
	compound []protoreflect.FieldDescriptor
	nested   []protoreflect.FieldDescriptor
}

// compoundKeys are the string fields that hold a key and a suffix,
// "<key>-<n>": a decision evaluation instance is its evaluation's key and
// its index (8.6+). Other strings named *Key (a message's correlationKey)
// are the user's and are never touched.
var compoundKeys = map[protoreflect.FullName]bool{
	"shardctl.gateway.EvaluatedDecision.decisionEvaluationInstanceKey": true,
}

func isCompoundKey(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.StringKind && !fd.IsList() && compoundKeys[fd.FullName()]
}

// rewriteCompound applies fn to the key a compound key starts with; a
// value of another form is left as it is (it is the shard's, not a key
// the proxy issued).
func rewriteCompound(v string, fd protoreflect.FieldDescriptor, fn func(protoreflect.FieldDescriptor, int64) (int64, error)) (string, error) {
	head, tail, ok := strings.Cut(v, "-")
	k, err := strconv.ParseInt(head, 10, 64)
	if !ok || err != nil {
		return v, nil
	}
	nk, err := fn(fd, k)
	if err != nil || nk == k {
		return v, err
	}
	return strconv.FormatInt(nk, 10) + "-" + tail, nil
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
		case isCompoundKey(fd):
			p.compound = append(p.compound, fd)
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
		if fd.HasPresence() && !m.Has(fd) {
			continue // an optional key left out stays left out
		}
		v := m.Get(fd).Int()
		nv, err := fn(fd, v)
		if err != nil {
			return err
		}
		if nv != v {
			m.Set(fd, protoreflect.ValueOfInt64(nv))
		}
	}
	for _, fd := range plan.compound {
		v := m.Get(fd).String()
		nv, err := rewriteCompound(v, fd, fn)
		if err != nil {
			return err
		}
		if nv != v {
			m.Set(fd, protoreflect.ValueOfString(nv))
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
		if u := r.UserTask; u != nil { // a task listener's job (8.8+)
			for _, k := range []*int64{u.FormKey, u.UserTaskKey} {
				if k != nil {
					*k = keyslot.With(*k, slot)
				}
			}
		}
		return
	}
	_ = Rewrite(m, func(_ protoreflect.FieldDescriptor, k int64) (int64, error) { return keyslot.With(k, slot), nil })
}
