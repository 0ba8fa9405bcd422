package h2

import (
	"fmt"
	"slices"
	"testing"

	"golang.org/x/net/http2/hpack"
)

func fieldsOf(kv ...string) []hpack.HeaderField {
	var out []hpack.HeaderField
	for i := 0; i < len(kv); i += 2 {
		out = append(out, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// Whatever mix of repeated and one-off blocks is written, a peer's
// decoder reads each back as it was written; the repeated ones are
// copies of their first encoding.
func TestHeaderEncoder(t *testing.T) {
	head := fieldsOf(":method", "POST", ":scheme", "http", ":path", "/gateway_protocol.Gateway/CreateProcessInstance",
		":authority", "127.0.0.1:26500", "content-type", "application/grpc", "te", "trailers")
	response := fieldsOf(":status", "200", "content-type", "application/grpc")
	trailers := fieldsOf("grpc-status", "0")
	secret := []hpack.HeaderField{{Name: "authorization", Value: "Bearer x", Sensitive: true}}
	var blocks [][]hpack.HeaderField
	for i := range 200 {
		blocks = append(blocks, head, response, trailers)
		// One-off blocks (a deadline's value): they pass through the cache.
		blocks = append(blocks, append(slices.Clone(head), hpack.HeaderField{Name: "grpc-timeout", Value: fmt.Sprintf("%dm", 10000-i)}))
		if i%50 == 0 {
			blocks = append(blocks, secret, fieldsOf("x-big", string(make([]byte, 2*maxCachedWire))))
		}
	}
	e := newHeaderEncoder()
	var got []hpack.HeaderField
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) { got = append(got, f) })
	for i, want := range blocks {
		got = got[:0]
		wire := e.encode(want)
		if i == 0 && wire[0] != 0x20 {
			t.Fatalf("the first block opens with %#x, want the table size update to 0 (0x20)", wire[0])
		}
		if _, err := dec.Write(wire); err != nil {
			t.Fatalf("block %d: the decoder refused it: %v", i, err)
		}
		if err := dec.Close(); err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if !sameFields(got, want) {
			t.Fatalf("block %d decoded as %v, want %v", i, got, want)
		}
	}
	for _, hot := range [][]hpack.HeaderField{head, response, trailers} {
		cached := false
		for _, b := range e.cache {
			cached = cached || b.wire != nil && sameFields(b.fields, hot)
		}
		if !cached {
			t.Errorf("%v is written over and over but not kept: one-off blocks pushed it out", hot[0])
		}
	}
	if n := testing.AllocsPerRun(100, func() { e.encode(head) }); n != 0 {
		t.Errorf("a kept block costs %.0f allocations, want 0", n)
	}
}
