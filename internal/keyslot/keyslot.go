// Package keyslot is the federation's key contract: a Zeebe key is
// partitionId << 51 | counter, so bits 58-62 are free (a shard has fewer
// than 128 partitions, bit 63 is the sign). The proxy puts the shard's
// slot (1-31) there in every key it returns and takes it out of every key
// it receives; slot 0 is a key no proxy wrote: the legacy shard's. Every
// front of the proxy, the simulator and migrate read keys through it. It
// imports nothing of this module.
package keyslot

const (
	// Shift is where the slot starts in a key, Bits its mask once shifted
	// down.
	Shift = 58
	Bits  = 0x1f
	mask  = int64(Bits) << Shift
	// MaxSlot is the highest slot a shard can have.
	MaxSlot = 31
	// MaxPartitions is the most partitions a shard may have for its keys
	// to leave the slot bits free.
	MaxPartitions = 127
)

// None reports the values Zeebe uses for "no key".
func None(k int64) bool { return k == 0 || k == -1 }

// With writes a shard's slot into a key, as the proxy returns it.
func With(key int64, slot int) int64 {
	if None(key) || key < 0 {
		return key
	}
	return key&^mask | int64(slot)<<Shift
}

// Split returns the slot a key carries and the key the shard issued.
func Split(key int64) (slot int, raw int64) {
	if None(key) || key < 0 {
		return 0, key
	}
	return int(key >> Shift & Bits), key &^ mask
}
