package proxy

import (
	"errors"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// keyFunc maps a key found in a message to the key to put there.
type keyFunc func(fd protoreflect.FieldDescriptor, key int64) (int64, error)

var errMalformed = errors.New("malformed protobuf message")

// rewriteWire appends message m (the wire form of md) to dst with fn
// applied to every key field rewriteKeys would visit, nested messages
// included, and every other byte copied as it is: the frame front's
// rewriting, with no decoding of what holds no key.
func rewriteWire(dst, m []byte, md protoreflect.MessageDescriptor, fn keyFunc) ([]byte, error) {
	fields := md.Fields()
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return dst, errMalformed
		}
		tag := m[:n]
		m = m[n:]
		fd := fields.ByNumber(num)
		switch {
		case fd != nil && typ == protowire.VarintType && isKeyField(fd):
			v, vn := protowire.ConsumeVarint(m)
			if vn < 0 {
				return dst, errMalformed
			}
			k, err := fn(fd, int64(v))
			if err != nil {
				return dst, err
			}
			dst = append(dst, tag...)
			dst = protowire.AppendVarint(dst, uint64(k))
			m = m[vn:]
		case fd != nil && typ == protowire.BytesType && fd.Kind() == protoreflect.MessageKind && !fd.IsMap() && holdsKeys(fd.Message()):
			b, bn := protowire.ConsumeBytes(m)
			if bn < 0 {
				return dst, errMalformed
			}
			inner, err := rewriteWire(nil, b, fd.Message(), fn)
			if err != nil {
				return dst, err
			}
			dst = append(dst, tag...)
			dst = protowire.AppendBytes(dst, inner)
			m = m[bn:]
		default:
			vn := protowire.ConsumeFieldValue(num, typ, m)
			if vn < 0 {
				return dst, errMalformed
			}
			dst = append(dst, tag...)
			dst = append(dst, m[:vn]...)
			m = m[vn:]
		}
	}
	return dst, nil
}

var keyHolders sync.Map // protoreflect.FullName -> bool

// holdsKeys reports whether a message type or one it holds has a key
// field: only those are taken apart.
func holdsKeys(md protoreflect.MessageDescriptor) bool {
	if v, ok := keyHolders.Load(md.FullName()); ok {
		return v.(bool)
	}
	keyHolders.Store(md.FullName(), false) // a type that holds itself
	plan := planFor(md)
	holds := len(plan.keys) > 0
	for _, fd := range plan.nested {
		holds = holds || holdsKeys(fd.Message())
	}
	keyHolders.Store(md.FullName(), holds)
	return holds
}

// wireInt64 reads the last value of a top-level varint field (as a
// protobuf parser keeps it); 0 when absent.
func wireInt64(m []byte, want protowire.Number) (int64, error) {
	var out int64
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return 0, errMalformed
		}
		m = m[n:]
		if num == want && typ == protowire.VarintType {
			v, vn := protowire.ConsumeVarint(m)
			if vn < 0 {
				return 0, errMalformed
			}
			out = int64(v)
			m = m[vn:]
			continue
		}
		vn := protowire.ConsumeFieldValue(num, typ, m)
		if vn < 0 {
			return 0, errMalformed
		}
		m = m[vn:]
	}
	return out, nil
}
