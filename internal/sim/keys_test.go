package sim

import "testing"

func TestKeys(t *testing.T) {
	g := keyGenerator{partition: 3}
	if k := g.next(); k != 3<<51+1 || PartitionOfKey(k) != 3 {
		t.Errorf("first key on partition 3 = %d (partition %d), want %d", k, PartitionOfKey(k), int64(3)<<51+1)
	}
	if k := g.next(); k != 3<<51+2 {
		t.Errorf("second key = %d", k)
	}
}

// Zeebe routes a message to abs(hashCode(correlationKey) % partitions) + 1
// with Java's String.hashCode arithmetic.
func TestMessagePartition(t *testing.T) {
	tests := []struct {
		key   string
		parts int32
		want  int32
	}{
		{"", 3, 1},
		{"a", 3, 2},     // 97 % 3 = 1
		{"hello", 3, 2}, // 99162322 % 3 = 1
		{"hello", 1, 1},
		// hashCode is Integer.MIN_VALUE; -2147483648 % 3 = -2, abs 2.
		{"polygenelubricants", 3, 3},
		{"order-42", 5, int32(abs32(javaHash("order-42")%5)) + 1},
	}
	for _, tt := range tests {
		if got := messagePartition(tt.key, tt.parts); got != tt.want {
			t.Errorf("messagePartition(%q, %d) = %d, want %d", tt.key, tt.parts, got, tt.want)
		}
	}
}

// javaHash is String.hashCode for ASCII, written the obvious way as a
// cross-check.
func javaHash(s string) int32 {
	var h int32
	for _, r := range s {
		h = h*31 + r
	}
	return h
}

func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}
