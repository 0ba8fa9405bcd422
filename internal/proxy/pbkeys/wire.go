package pbkeys

import (
	"errors"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Func maps a key found in a message to the key to put there.
type Func func(fd protoreflect.FieldDescriptor, key int64) (int64, error)

var ErrMalformed = errors.New("malformed protobuf message")

// RewriteWire appends message m (the wire form of md) to dst with fn
// applied to every key field Rewrite would visit, nested messages
// included, and every other byte copied as it is: the frame front's
// rewriting, with no decoding of what holds no key.
func RewriteWire(dst, m []byte, md protoreflect.MessageDescriptor, fn Func) ([]byte, error) {
	return wirePlanFor(md).rewrite(dst, m, fn)
}

// wirePlan is where a message type holds keys on the wire, by field
// number: made once per type, so that rewriting asks the descriptors
// nothing.
type wirePlan struct {
	fields []wireField // by field number; past its end, nothing
}

type wireField struct {
	fd       protoreflect.FieldDescriptor // a key field (varint), a compound key (string), or a message that holds keys
	key      bool
	compound bool
	sub      *wirePlan // the message's plan (neither key)
}

var wirePlans sync.Map // protoreflect.FullName -> *wirePlan

func wirePlanFor(md protoreflect.MessageDescriptor) *wirePlan {
	if p, ok := wirePlans.Load(md.FullName()); ok {
		return p.(*wirePlan)
	}
	building := map[protoreflect.FullName]*wirePlan{}
	buildWirePlan(md, building)
	for name, bp := range building {
		wirePlans.LoadOrStore(name, bp)
	}
	v, _ := wirePlans.Load(md.FullName())
	return v.(*wirePlan)
}

// buildWirePlan plans md and the types below it that hold keys; a type
// that holds itself points at its own plan.
func buildWirePlan(md protoreflect.MessageDescriptor, building map[protoreflect.FullName]*wirePlan) *wirePlan {
	if p, ok := building[md.FullName()]; ok {
		return p
	}
	p := &wirePlan{}
	building[md.FullName()] = p
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		var f wireField
		switch {
		case isKeyField(fd):
			f = wireField{fd: fd, key: true}
		case isCompoundKey(fd):
			f = wireField{fd: fd, compound: true}
		case fd.Kind() == protoreflect.MessageKind && !fd.IsMap() && HoldsKeys(fd.Message()):
			f = wireField{fd: fd, sub: buildWirePlan(fd.Message(), building)}
		default:
			continue
		}
		n := int(fd.Number())
		if n >= len(p.fields) {
			p.fields = append(p.fields, make([]wireField, n+1-len(p.fields))...)
		}
		p.fields[n] = f
	}
	return p
}

func (p *wirePlan) rewrite(dst, m []byte, fn Func) ([]byte, error) {
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return dst, ErrMalformed
		}
		tag := m[:n]
		m = m[n:]
		var f *wireField
		if int(num) < len(p.fields) {
			f = &p.fields[num]
		}
		switch {
		case f != nil && f.key && typ == protowire.VarintType:
			v, vn := protowire.ConsumeVarint(m)
			if vn < 0 {
				return dst, ErrMalformed
			}
			k, err := fn(f.fd, int64(v))
			if err != nil {
				return dst, err
			}
			dst = append(dst, tag...)
			dst = protowire.AppendVarint(dst, uint64(k))
			m = m[vn:]
		case f != nil && f.compound && typ == protowire.BytesType:
			b, bn := protowire.ConsumeBytes(m)
			if bn < 0 {
				return dst, ErrMalformed
			}
			v, err := rewriteCompound(string(b), f.fd, fn)
			if err != nil {
				return dst, err
			}
			dst = append(dst, tag...)
			dst = protowire.AppendString(dst, v)
			m = m[bn:]
		case f != nil && f.sub != nil && typ == protowire.BytesType:
			b, bn := protowire.ConsumeBytes(m)
			if bn < 0 {
				return dst, ErrMalformed
			}
			dst = append(dst, tag...)
			// The rewritten message goes after the tag, then moves up by
			// the size of its length, which only then is known.
			at := len(dst)
			var err error
			if dst, err = f.sub.rewrite(dst, b, fn); err != nil {
				return dst, err
			}
			size := len(dst) - at
			k := protowire.SizeVarint(uint64(size))
			dst = append(dst, make([]byte, k)...)
			copy(dst[at+k:], dst[at:at+size])
			protowire.AppendVarint(dst[:at], uint64(size))
			m = m[bn:]
		default:
			vn := protowire.ConsumeFieldValue(num, typ, m)
			if vn < 0 {
				return dst, ErrMalformed
			}
			dst = append(dst, tag...)
			dst = append(dst, m[:vn]...)
			m = m[vn:]
		}
	}
	return dst, nil
}

var keyHolders sync.Map // protoreflect.FullName -> bool

// HoldsKeys reports whether a message type or one it holds has a key
// field: only those are taken apart.
func HoldsKeys(md protoreflect.MessageDescriptor) bool {
	if v, ok := keyHolders.Load(md.FullName()); ok {
		return v.(bool)
	}
	keyHolders.Store(md.FullName(), false) // a type that holds itself
	plan := planFor(md)
	holds := len(plan.keys)+len(plan.compound) > 0
	for _, fd := range plan.nested {
		holds = holds || HoldsKeys(fd.Message())
	}
	keyHolders.Store(md.FullName(), holds)
	return holds
}

// WireCount counts the occurrences of a top-level field (the entries of
// a repeated one); a malformed message counts what came before the fault.
func WireCount(m []byte, want protowire.Number) int {
	n := 0
	for len(m) > 0 {
		num, typ, tn := protowire.ConsumeTag(m)
		if tn < 0 {
			return n
		}
		m = m[tn:]
		vn := protowire.ConsumeFieldValue(num, typ, m)
		if vn < 0 {
			return n
		}
		if num == want {
			n++
		}
		m = m[vn:]
	}
	return n
}

// WireInt64 reads the last value of a top-level varint field (as a
// protobuf parser keeps it); 0 when absent.
func WireInt64(m []byte, want protowire.Number) (int64, error) {
	var out int64
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return 0, ErrMalformed
		}
		m = m[n:]
		if num == want && typ == protowire.VarintType {
			v, vn := protowire.ConsumeVarint(m)
			if vn < 0 {
				return 0, ErrMalformed
			}
			out = int64(v)
			m = m[vn:]
			continue
		}
		vn := protowire.ConsumeFieldValue(num, typ, m)
		if vn < 0 {
			return 0, ErrMalformed
		}
		m = m[vn:]
	}
	return out, nil
}
