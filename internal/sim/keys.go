package sim

// Zeebe keys carry their partition: key = partitionId << 51 | counter, and
// the first key a partition issues is partitionId<<51 + 1. Every fresh
// cluster therefore issues the same keys, which is what the federation
// proxy's slot bits exist for.
const keyBits = 51

func encodeKey(partition int32, counter int64) int64 { return int64(partition)<<keyBits | counter }

// PartitionOfKey returns the partition id a key was issued by.
func PartitionOfKey(key int64) int32 { return int32(key >> keyBits) }

// keyGenerator issues one partition's keys. It is used only on that
// partition's processing goroutine.
type keyGenerator struct {
	partition int32
	counter   int64
}

func (g *keyGenerator) next() int64 {
	g.counter++
	return encodeKey(g.partition, g.counter)
}

// messagePartition is Zeebe's SubscriptionUtil: a Java String.hashCode-like
// hash over the correlation key's UTF-8 bytes (signed bytes, int32
// arithmetic), then abs(h % count) + 1.
func messagePartition(correlationKey string, partitions int32) int32 {
	var h int32
	for i := 0; i < len(correlationKey); i++ {
		h = 31*h + int32(int8(correlationKey[i]))
	}
	m := h % partitions
	if m < 0 {
		m = -m
	}
	return m + 1
}
