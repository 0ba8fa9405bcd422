package search

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkDecodePage is what a proxy does with a shard's page of 100
// process instances: read the answer, each item, and write it again.
func BenchmarkDecodePage(b *testing.B) {
	r := ProcessInstances
	items := randomInstances(rand.New(rand.NewPCG(1, 1)), 100, 1<<51)
	page := Result{Items: items, Total: 100}.AppendJSON(r, Order{Key: r.KeyField()}, nil)
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		res, err := DecodeResult(r, page)
		if err != nil || len(res.Items) != 100 {
			b.Fatal(err)
		}
		_ = res.AppendJSON(r, Order{Key: r.KeyField()}, nil)
	}
}
