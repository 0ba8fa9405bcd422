package route

import (
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/shardctl/shardctl/internal/keyslot"
)

// shardSet is the proxy's shards and pool weights as one change left
// them. It is published whole and never changed after: the hot path
// loads it without a lock while shards join and leave, and placement is
// a pure function of it and of each shard's live counters (grpc-go's
// picker: a frozen view; the mechanics around it retry and cool off).
type shardSet struct {
	all    []*Shard // by slot
	bySlot [keyslot.MaxSlot + 1]*Shard
	legacy *Shard
	// weights are the pools' shares of new instances in percent; nil
	// places over every shard alike.
	weights map[string]int
}

var emptySet = &shardSet{}

// build makes a set of shards (any order) with the legacy shard's id and
// the weights given; shards and weights are copied.
func build(shards []*Shard, legacyID string, weights map[string]int) *shardSet {
	ss := &shardSet{all: slices.Clone(shards), weights: maps.Clone(weights)}
	slices.SortFunc(ss.all, func(a, b *Shard) int { return a.Slot - b.Slot })
	for _, s := range ss.all {
		ss.bySlot[s.Slot] = s
		if legacyID != "" && s.ID == legacyID {
			ss.legacy = s
		}
	}
	return ss
}

// with is the set plus s.
func (ss *shardSet) with(s *Shard, legacyID string) *shardSet {
	return build(append(slices.Clone(ss.all), s), legacyID, ss.weights)
}

// without is the set less s.
func (ss *shardSet) without(s *Shard, legacyID string) *shardSet {
	return build(slices.DeleteFunc(slices.Clone(ss.all), func(o *Shard) bool { return o == s }), legacyID, ss.weights)
}

// withWeights is the set with other pool weights.
func (ss *shardSet) withWeights(w map[string]int, legacyID string) *shardSet {
	if len(w) == 0 {
		w = nil
	}
	return build(ss.all, legacyID, w)
}

func (ss *shardSet) byID(id string) *Shard {
	for _, s := range ss.all {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// forKey is the shard a key's slot names; slot 0 is the legacy shard's.
func (ss *shardSet) forKey(slot int) *Shard {
	if slot == 0 {
		return ss.legacy
	}
	return ss.bySlot[slot]
}

// pick is the power-of-two-choices shard for something new: of two random
// eligible shards, the cheaper: several times faster by recent latency,
// else fewer placements in flight. With pool weights a pool is drawn by weight first,
// among those with an eligible shard, then two of its shards.
func (ss *shardSet) pick(now time.Time, eligible func(*Shard) bool) *Shard {
	shards := ss.all
	if ss.weights != nil {
		shards = weightedPool(shards, ss.weights, eligible)
		if len(shards) == 0 {
			return nil
		}
	}
	// Two random draws among the eligible, without building a list: shard
	// sets are small, so rejection sampling ends fast.
	var a, b *Shard
	for range 2 * len(shards) {
		s := shards[rand.IntN(len(shards))]
		if !eligible(s) {
			continue
		}
		if a == nil {
			a = s
		} else if s != a {
			b = s
			break
		}
	}
	if b == nil {
		// Unlucky draws, or one eligible shard at most: scan for the
		// cheapest other than a.
		for _, s := range shards {
			if s != a && eligible(s) && (b == nil || cheaper(s, b, now)) {
				b = s
			}
		}
	}
	if a == nil {
		return b
	}
	if b != nil && cheaper(b, a, now) {
		return b
	}
	return a
}

// weightedPool draws a pool by weight among the pools whose shards take
// instances, and returns its eligible shards.
func weightedPool(shards []*Shard, weights map[string]int, eligible func(*Shard) bool) []*Shard {
	total := 0
	var pools []string // with an eligible shard and a weight, each once
	for _, s := range shards {
		pool := s.Pool()
		if w := weights[pool]; w > 0 && eligible(s) && !slices.Contains(pools, pool) {
			pools = append(pools, pool)
			total += w
		}
	}
	if total == 0 {
		return nil
	}
	r := rand.IntN(total)
	chosen := pools[len(pools)-1]
	for _, pool := range pools {
		if r -= weights[pool]; r < 0 {
			chosen = pool
			break
		}
	}
	var out []*Shard
	for _, s := range shards {
		if s.Pool() == chosen && eligible(s) {
			out = append(out, s)
		}
	}
	return out
}
