package keyslot

import (
	"testing"
)

func TestSlotBits(t *testing.T) {
	for _, tt := range []struct {
		key  int64
		slot int
	}{{1<<51 + 1, 1}, {127<<51 + 123456, 31}, {2<<51 + 9, 17}} {
		k := With(tt.key, tt.slot)
		if s, raw := Split(k); s != tt.slot || raw != tt.key || k < 0 {
			t.Errorf("With(%d,%d) = %d -> slot %d raw %d", tt.key, tt.slot, k, s, raw)
		}
	}
	for _, k := range []int64{0, -1} {
		if With(k, 5) != k {
			t.Errorf("%d must stay as it is", k)
		}
	}
}
