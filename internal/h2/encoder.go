package h2

import "golang.org/x/net/http2/hpack"

// headerEncoder encodes header blocks with no dynamic table, as HAProxy
// does: a block's encoding then depends on its fields alone, and the few
// blocks a connection writes over and over (a call's head, a response's
// head, its trailers) are encoded once and copied after that. hpack's
// Encoder searches its tables field by field (hashing each name and
// value), which cost the proxy a tenth of its CPU per call. What the
// peer loses is compression of repeated fields: bytes, which matter
// less here than CPU.
type headerEncoder struct {
	enc   *hpack.Encoder
	out   []byte // what enc wrote
	cache [8]encodedBlock
	hand  int // the next entry to look at for replacement (CLOCK)
}

type encodedBlock struct {
	fields []hpack.HeaderField
	wire   []byte
	used   bool // hit since the hand last passed
}

// Blocks larger than this are encoded each time rather than kept.
const (
	maxCachedWire   = 512
	maxCachedFields = 16
)

func newHeaderEncoder() *headerEncoder {
	e := &headerEncoder{}
	e.enc = hpack.NewEncoder(e)
	e.enc.SetMaxDynamicTableSize(0) // announced at the start of the first block
	return e
}

// Write is enc's.
func (e *headerEncoder) Write(p []byte) (int, error) {
	e.out = append(e.out, p...)
	return len(p), nil
}

// encode returns the block for fields, valid until the next call.
func (e *headerEncoder) encode(fields []hpack.HeaderField) []byte {
	for i := range e.cache {
		if b := &e.cache[i]; b.wire != nil && sameFields(b.fields, fields) {
			b.used = true
			return b.wire
		}
	}
	e.out = e.out[:0]
	for _, f := range fields {
		_ = e.enc.WriteField(f)
	}
	// The first block opens with the table size update, which is sent
	// once.
	if len(e.out) > 0 && len(e.out) <= maxCachedWire && len(fields) <= maxCachedFields && e.out[0]&0xe0 != 0x20 {
		e.keep(fields)
	}
	return e.out
}

// keep puts what was just encoded in the place of an entry not hit
// since the hand last passed it: blocks written once (a deadline's
// value in a head) pass through the cache without pushing out the ones
// written over and over.
func (e *headerEncoder) keep(fields []hpack.HeaderField) {
	for {
		b := &e.cache[e.hand]
		e.hand = (e.hand + 1) % len(e.cache)
		if b.used {
			b.used = false
			continue
		}
		b.fields = append(b.fields[:0], fields...)
		b.wire = append(b.wire[:0], e.out...)
		return
	}
}

func sameFields(a, b []hpack.HeaderField) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
