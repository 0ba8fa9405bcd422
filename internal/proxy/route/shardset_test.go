package route

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/upstream"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// fakeShard is a shard with no connection, for placement alone.
func fakeShard(id string, slot int, pool string) *Shard {
	// A connection that is never dialed: calls on a fake do not use it.
	s := &Shard{ShardConfig: proxyapi.ShardConfig{ID: id, Slot: slot, Pool: pool}, Conn: &upstream.Conn{}, inflightGauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "test"})}
	s.state.Store(proxyapi.Up)
	s.pool.Store(pool)
	return s
}

func ids(shards []*Shard) []string {
	var out []string
	for _, s := range shards {
		out = append(out, s.ID)
	}
	return out
}

// A set is sorted by slot whatever order shards come in, routes slot 0 to
// the legacy shard, and changes only by making another set.
func TestShardSet(t *testing.T) {
	a, b, c := fakeShard("a", 3, "blue"), fakeShard("b", 1, "blue"), fakeShard("c", 7, "green")
	ss := build([]*Shard{a, b}, "a", nil)
	if got := ids(ss.all); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("order %v, want by slot", got)
	}
	bigger := ss.with(c, "a")
	if got := ids(ss.all); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("with changed the set it was made from: %v", got)
	}
	for _, tc := range []struct {
		set  *shardSet
		slot int
		want *Shard
	}{
		{ss, 0, a}, {ss, 1, b}, {ss, 3, a}, {ss, 7, nil},
		{bigger, 7, c}, {bigger.without(a, "a"), 0, nil}, {bigger.without(a, "a"), 3, nil}, {build(nil, "", nil), 0, nil},
	} {
		if got := tc.set.forKey(tc.slot); got != tc.want {
			t.Errorf("forKey(%d) in %v = %v, want %v", tc.slot, ids(tc.set.all), got, tc.want)
		}
	}
	weighted := bigger.withWeights(map[string]int{"green": 100}, "a")
	if bigger.weights != nil || weighted.weights["green"] != 100 || len(weighted.all) != 3 {
		t.Errorf("withWeights: %v then %v", bigger.weights, weighted.weights)
	}
}

// Placement on a frozen set: only eligible shards, the pool a weight
// draws, and of two shards the one with fewer placements in flight.
func TestShardSetPick(t *testing.T) {
	blue1, blue2, green1 := fakeShard("blue-1", 1, "blue"), fakeShard("blue-2", 2, "blue"), fakeShard("green-1", 3, "green")
	blue2.Placing.Store(50)
	all := func(*Shard) bool { return true }
	for _, tc := range []struct {
		name     string
		weights  map[string]int
		eligible func(*Shard) bool
		want     map[string]bool // shards that may be picked; nil: none
		never    string          // with P2C, the busy shard is never picked from a pair of two
	}{
		{"no weights: any shard", nil, all, map[string]bool{"blue-1": true, "blue-2": true, "green-1": true}, ""},
		{"green only", map[string]int{"green": 100}, all, map[string]bool{"green-1": true}, ""},
		{"blue: the idle one", map[string]int{"blue": 100}, all, map[string]bool{"blue-1": true}, "blue-2"},
		{"blue weighted but none eligible", map[string]int{"blue": 100}, func(s *Shard) bool { return s.Pool() != "blue" }, nil, ""},
		{"nothing eligible", nil, func(*Shard) bool { return false }, nil, ""},
		{"one eligible", nil, func(s *Shard) bool { return s == blue2 }, map[string]bool{"blue-2": true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ss := build([]*Shard{green1, blue2, blue1}, "", tc.weights)
			for range 200 {
				got := ss.pick(time.Now(), tc.eligible)
				switch {
				case got == nil && tc.want != nil:
					t.Fatal("picked nothing")
				case got != nil && !tc.want[got.ID]:
					t.Fatalf("picked %s, want one of %v", got.ID, tc.want)
				case got != nil && got.ID == tc.never:
					t.Fatalf("picked the busy %s over an idle shard of its pool", got.ID)
				}
			}
		})
	}
}

// A shard joining under traffic: readers holding the shard list see it
// unchanged, and the race detector sees no write to what they read (the
// list was appended to and sorted in place before).
func TestShardJoiningUnderReaders(t *testing.T) {
	shards := simtest.StartN(t, 4, sim.Config{Partitions: 1})
	cfgs := simtest.ShardConfigs(shards)
	for i := range cfgs {
		cfgs[i].Slot = 5 - i // 4, 3, 2, 1: each newcomer sorts first
	}
	p := startCore(t, Config{Shards: cfgs[:1], Dynamic: true})
	ctx, stop := context.WithCancel(budget.Context(t, time.Minute))
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				held := p.Snapshot()
				before := ids(held)
				for range 100 {
					_ = p.Pick(time.Now(), nil, "")
					_, _, _ = p.ShardForKey(int64(held[0].Slot) << keyslot.Shift)
				}
				if after := ids(held); !slices.Equal(before, after) {
					t.Errorf("a list a reader held changed from %v to %v", before, after)
					return
				}
			}
		}()
	}
	for _, sc := range cfgs[1:] {
		if err := p.AddShard(ctx, sc, true); err != nil {
			t.Error(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	wg.Wait()
	if got := ids(p.Snapshot()); !slices.Equal(got, []string{"shard-4", "shard-3", "shard-2", "shard-1"}) {
		t.Errorf("shards %v, want by slot", got)
	}
}

// Latency decides only when one shard is several times as fast; an old
// average fades, so a shard left alone for being slow is tried again.
func TestCheaper(t *testing.T) {
	now := time.Now()
	fast, slow, same := fakeShard("fast", 1, ""), fakeShard("slow", 2, ""), fakeShard("same", 3, "")
	fast.latency.observe(2*time.Millisecond, now)
	slow.latency.observe(20*time.Millisecond, now)
	same.latency.observe(3*time.Millisecond, now)
	same.Placing.Store(1)
	for _, tc := range []struct {
		b, a *Shard
		at   time.Time
		want bool
	}{
		{fast, slow, now, true},
		{slow, fast, now, false},
		{fast, same, now, true},  // as fast, and fewer in flight
		{same, fast, now, false}, // as fast, more in flight
		{slow, fast, now.Add(time.Minute), false},
		{fast, slow, now.Add(time.Minute), false}, // both faded to the floor: a tie keeps a
	} {
		if got := cheaper(tc.b, tc.a, tc.at); got != tc.want {
			t.Errorf("cheaper(%s, %s) after %v = %v, want %v", tc.b.ID, tc.a.ID, tc.at.Sub(now), got, tc.want)
		}
	}
	if got := slow.current(now.Add(latencyFade)); got > float64(8*time.Millisecond) || got < float64(7*time.Millisecond) {
		t.Errorf("20 ms faded for one time constant: %v, want about 7.4 ms", time.Duration(got))
	}
	// A shard with placements in flight and no answer (stalled) does not
	// fade: it must not look the fastest.
	slow.Placing.Store(3)
	if got := slow.current(now.Add(time.Minute)); got != float64(20*time.Millisecond) {
		t.Errorf("a stalled shard's latency faded to %v", time.Duration(got))
	}
	if cheaper(slow, fast, now.Add(time.Minute)) {
		t.Error("a stalled shard was cheaper than a fast one")
	}
	// A shard that stalled right after it measured fast: its latency
	// stays low, but its calls pile up; one whose latency reads 5× as
	// high with nothing in flight is cheaper.
	stalled, busy := fakeShard("stalled", 4, ""), fakeShard("busy", 5, "")
	stalled.latency.observe(time.Millisecond, now)
	busy.latency.observe(5*time.Millisecond, now)
	stalled.Placing.Store(30)
	if !cheaper(busy, stalled, now) || cheaper(stalled, busy, now) {
		t.Error("a shard with 30 placements hanging was cheaper than one 5× slower with none")
	}
	// A shard its queue paces answers creations as fast as any: a
	// slower one that is not paced is cheaper.
	paced := fakeShard("paced", 6, "")
	paced.latency.observe(time.Millisecond, now)
	paced.admission.pacer.pacing.Store(true)
	if !cheaper(slow, paced, now) || cheaper(paced, slow, now) {
		t.Error("a paced shard was cheaper than one that is not")
	}
}
