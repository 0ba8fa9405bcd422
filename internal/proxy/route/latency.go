package route

import (
	"math"
	"sync/atomic"
	"time"
)

// latency is a shard's placement latency as an exponentially weighted
// moving average that fades while no placement is measured, so that a
// shard power-of-two-choices stopped picking for being slow is tried
// again later, and measured again (Finagle's peak EWMA has the same
// idea). Two atomics, not a lock: a reading that mixes two updates is
// close enough.
type latency struct {
	ewma atomic.Uint64 // math.Float64bits of nanoseconds
	at   atomic.Int64  // unix nanos of the last sample
}

const (
	latencyWeight = 0.2             // of a new sample
	latencyFade   = 3 * time.Second // an old average fades with this time constant
	// latencyRatio is how much faster a shard must be for latency to
	// decide: less is noise on a busy machine (a GC pause, a scheduler
	// hiccup), and following noise herds placements onto one shard.
	latencyRatio = 4
	// latencyFloor: placements faster than this are all alike. A Zeebe
	// cluster takes milliseconds; under one, what differs between shards
	// is the proxy's own scheduling, and one slow sample among calls of
	// 100 µs would keep a shard out of placement while it fades.
	latencyFloor = time.Millisecond
)

func (l *latency) observe(d time.Duration, now time.Time) {
	for {
		old := l.ewma.Load()
		v := float64(d)
		if old != 0 {
			v = latencyWeight*float64(d) + (1-latencyWeight)*l.faded(old, now)
		}
		if l.ewma.CompareAndSwap(old, math.Float64bits(v)) {
			l.at.Store(now.UnixNano())
			return
		}
	}
}

func (l *latency) faded(bits uint64, now time.Time) float64 {
	age := now.Sub(time.Unix(0, l.at.Load()))
	return math.Float64frombits(bits) * math.Exp(-max(age, 0).Seconds()/latencyFade.Seconds())
}

// cheaper reports whether power-of-two-choices should take b over a.
// Each shard's cost is its recent latency times its placements in flight
// plus one (Finagle's peak EWMA): a stalled shard measures no latency,
// but its calls pile up, so its cost grows with them. The one latencyRatio
// times as cheap wins; closer than that, the one with fewer placements in
// flight (a on a tie: it was drawn at random). A shard its queue paces
// is dearer than one it does not, whatever their latencies: creations
// are answered before the work behind them is done, so a shard past its
// knee answers them as fast as any.
func cheaper(b, a *Shard, now time.Time) bool {
	if qa, qb := a.admission.pacer.pacing.Load(), b.admission.pacer.pacing.Load(); qa != qb {
		return qa
	}
	pa, pb := a.Placing.Load(), b.Placing.Load()
	ca, cb := a.current(now)*float64(pa+1), b.current(now)*float64(pb+1)
	switch {
	case latencyRatio*cb < ca:
		return true
	case latencyRatio*ca < cb:
		return false
	}
	return pb < pa
}

// current is the shard's recent placement latency. It fades only while
// nothing is in flight: a stalled shard measures nothing, and a fading
// average would make it look the fastest of all.
func (s *Shard) current(now time.Time) float64 {
	v := math.Float64frombits(s.latency.ewma.Load())
	if s.Placing.Load() == 0 {
		v = s.latency.faded(s.latency.ewma.Load(), now)
	}
	return max(v, float64(latencyFloor))
}
