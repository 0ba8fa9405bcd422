package route

import "sync/atomic"

// A fixed limit of root instances in flight (--instance-limit N): a
// congested shard (its log held congestedLag records not processed at
// this reading or the one before) gets no new instance while it holds N.
// It is the blunt tool for a process whose cost per instance is known;
// the default is pacing (pacing.go), which reads the shard's queue and
// is not fooled by instances that wait on purpose.

// congestedLag is records not processed from which a shard counts as
// congested.
const congestedLag = 10

// InstanceLimitAuto and InstanceLimitOff are Config.InstanceLimit's
// special values: pacing by the shard's queue, or no admission of either
// kind; a positive limit is fixed and replaces pacing.
const (
	InstanceLimitAuto = 0
	InstanceLimitOff  = -1
)

// instanceLimit is one shard's instances in flight and their limit. The
// placement path reads it lock-free; the admission loop updates it.
type instanceLimit struct {
	inFlight atomic.Int64 // as last read from the shard's metrics
	placed   atomic.Int64 // instances this proxy created there since
	limit    atomic.Int64 // ≤ 0: none
	binding  atomic.Bool  // the shard is congested: the limit applies
	limited  atomic.Bool  // the limit refused a placement since the last reading
	lastLag  float64      // the admission loop's: the reading before's
}

// admits reports whether the shard is under its limit, counting what
// this proxy placed since the last reading as still in flight.
func (l *instanceLimit) admits() bool {
	limit := l.limit.Load()
	if limit <= 0 || !l.binding.Load() || l.inFlight.Load()+l.placed.Load() < limit {
		return true
	}
	if !l.limited.Load() {
		l.limited.Store(true)
	}
	return false
}

// observe takes a reading of the instances in flight and the records
// not processed, and applies limit (≤ 0: none). It reports whether the
// limit binds and whether it refused a placement since the last reading.
func (l *instanceLimit) observe(inFlight, lag float64, limit int64) (binding, refused bool) {
	refused = l.limited.Swap(false)
	binding = limit > 0 && (lag >= congestedLag || l.lastLag >= congestedLag)
	l.lastLag = lag
	// The reading and the placements since are one step, for the
	// placement path: a new count with the old placements would admit
	// them twice.
	l.inFlight.Store(int64(inFlight))
	l.placed.Store(0)
	l.limit.Store(max(limit, 0))
	l.binding.Store(binding)
	return binding, refused
}
