package upstream

import (
	"testing"
)

func TestConnsFor(t *testing.T) {
	for _, tc := range []struct {
		want       int64
		advertised uint32
		conns      int
	}{
		{1000, 0, 1},    // no limit advertised
		{1000, 100, 10}, // Zeebe-like limit
		{1000, 300, 4},  // rounded up
		{40, 8, 5},
		{1000, 10, 16}, // capped
		{0, 8, 1},
	} {
		if got := ConnsFor(tc.want, tc.advertised); got != tc.conns {
			t.Errorf("ConnsFor(%d, %d) = %d, want %d", tc.want, tc.advertised, got, tc.conns)
		}
	}
}
