package route

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Admission by root instances in flight. Past its knee a shard accepts
// new instances faster than it completes them; each one it accepts costs
// it processing now and is finished later, so the more it accepts the
// fewer it completes (the scissors). Its log backlog says little of this
// while job workers hold the work, but the instances in flight grow
// without bound. So the proxy keeps each shard's instances in flight
// under a limit, and a shard at its limit gets no new instance until
// some complete: past the knee the shard is offered what it completes.
//
// The limit is learned the way BBR sizes a TCP window (bottleneck rate ×
// round trip, times a gain): the shard's best completion rate over the
// last minute, times the shortest time an instance spent in flight over
// the last five (instances in flight ÷ completion rate, Little's law)
// plus the reading interval, times instanceGain; never under
// minInstances per partition.
// The limit binds only while the shard is congested: its log held at
// least congestedLag records it had not processed, at this reading or
// the one before. Instances also pile up when the job workers cannot keep
// up (a stalled shard holds their calls), and then the shards' logs are
// empty: refusing there would turn the workers' trouble into the
// clients' errors, and leave only the stalled shard with room.
//
// Time in flight is only learned while the limit refused nothing (BBR
// probes for its round trip for the same reason): at the limit, the
// instances queued inside the shard lengthen it, a longer time raises
// the limit, and the limit would climb with its own queue.
// A steady load below the knee stays under it with room to double; a
// load that grows finds the limit growing with the completions.

// Learning the instance limit.
const (
	// rateWindow is how far back the best completion rate is taken,
	// timeWindow the shortest time in flight: longer, so that the time
	// learned at a light load outlasts a minute at the knee, where the
	// shard queues before the limit binds.
	rateWindow = time.Minute
	timeWindow = 5 * time.Minute
	// instanceSpan is the span a completion rate is measured over: long
	// enough that a worker's batch of completions does not read as a rate.
	instanceSpan = 5 * time.Second
	instanceGain = 2
	// minInstances per partition: a shard just started, or idle, takes a
	// burst of this many before its completions teach the proxy more.
	minInstances = 64
	// congestedLag is records not processed from which a shard counts as
	// congested.
	congestedLag = 10
)

// InstanceLimitAuto and InstanceLimitOff are Config.InstanceLimit's
// special values; a positive limit is fixed.
const (
	InstanceLimitAuto = 0
	InstanceLimitOff  = -1
)

// instanceReading is one reading of a shard's root instances.
type instanceReading struct {
	at              time.Time
	inFlight, ended float64
	lag             float64 // records not processed
	limited         bool    // the limit refused a placement since the reading before
}

// instanceLimit is one shard's instances in flight and their limit. The
// placement path reads it lock-free; the admission loop updates it.
type instanceLimit struct {
	inFlight atomic.Int64 // as last read from the shard's metrics
	placed   atomic.Int64 // instances this proxy created there since
	limit    atomic.Int64 // ≤ 0: none
	binding  atomic.Bool  // the shard is congested: the limit applies
	limited  atomic.Bool  // the limit refused a placement since the last reading

	mu       sync.Mutex // the admission loop's
	readings []instanceReading
	// inFlightTime is the last time in flight learned while nothing was
	// refused: kept while the limit refuses.
	inFlightTime time.Duration
}

// instanceStatus is what a reading taught: the limit set (0: none), the
// best completion rate in the window (per second) and the shortest time
// in flight.
type instanceStatus struct {
	limit        int64
	binding      bool
	rate         float64
	inFlightTime time.Duration
	// refused: the limit refused a placement since the reading before.
	refused bool
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

// observe takes a reading and sets the limit: fixed when configured > 0,
// none when off, else learned.
func (l *instanceLimit) observe(r instanceReading, partitions int, interval time.Duration, configured int64) instanceStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.limited = l.limited.Swap(false)
	congested := r.lag >= congestedLag
	if n := len(l.readings); n > 0 && r.ended < l.readings[n-1].ended {
		// A partition's counters restarted with its leader: the rates
		// across the restart mean nothing.
		l.readings = l.readings[:0]
	}
	cut := 0
	for cut < len(l.readings) && r.at.Sub(l.readings[cut].at) > timeWindow {
		cut++
	}
	if n := len(l.readings); n > cut && l.readings[n-1].lag >= congestedLag {
		congested = true
	}
	l.readings = append(l.readings[cut:], r)
	st := instanceStatus{refused: r.limited}
	var learned bool
	st.rate, st.inFlightTime, learned = bestRate(l.readings, r.at.Add(-rateWindow))
	if learned {
		l.inFlightTime = st.inFlightTime
	}
	st.inFlightTime = l.inFlightTime
	// The reading and the placements since are one step, for the
	// placement path: a new count with the old placements would admit
	// them twice.
	l.inFlight.Store(int64(r.inFlight))
	l.placed.Store(0)
	switch {
	case configured == InstanceLimitOff:
	case configured > 0:
		st.limit = configured
	default:
		learned := instanceGain * st.rate * (st.inFlightTime + interval).Seconds()
		st.limit = max(int64(minInstances*max(partitions, 1)), int64(math.Ceil(learned)))
	}
	st.binding = congested && st.limit > 0
	l.limit.Store(st.limit)
	l.binding.Store(st.binding)
	return st
}

// bestRate is the best completion rate over any instanceSpan of the
// readings since rateSince, and the shortest time in flight (Little's
// law: the mean instances in flight over a span ÷ its completion rate)
// over the spans in which the limit refused nothing, with whether there
// was one; zero without a completion.
func bestRate(rs []instanceReading, rateSince time.Time) (rate float64, inFlight time.Duration, learned bool) {
	i := 0
	minTime := math.Inf(1)
	for j := range rs {
		for i+1 < j && rs[j].at.Sub(rs[i+1].at) >= instanceSpan {
			i++
		}
		span := rs[j].at.Sub(rs[i].at)
		if span < instanceSpan {
			continue
		}
		r := (rs[j].ended - rs[i].ended) / span.Seconds()
		if r <= 0 {
			continue
		}
		if !rs[i].at.Before(rateSince) {
			rate = max(rate, r)
		}
		var sum float64
		free := true
		for k, x := range rs[i : j+1] {
			sum += x.inFlight
			// The first reading's flag is about the span before it.
			free = free && (k == 0 || !x.limited)
		}
		if free {
			minTime = min(minTime, sum/float64(j-i+1)/r)
		}
	}
	if math.IsInf(minTime, 1) {
		return rate, 0, false
	}
	return rate, time.Duration(minTime * float64(time.Second)), true
}
