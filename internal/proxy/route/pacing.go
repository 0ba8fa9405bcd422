package route

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/signals"
)

// Pacing: admission by the shard's own queue. A shard past its knee is
// told apart from a busy one by the time its records wait to be
// processed, not by how many instances it holds: instances that wait on
// purpose (a timer, a user task, a message) write no record while they
// wait, so they are no queue, and ten thousand of them say nothing of
// the shard's load. The proxy reads each shard's metrics every
// BacklogInterval and takes its queue delay as the longer of
//
//   - the stream processor's mean latency over the interval
//     (zeebe_stream_processor_latency, _seconds since 8.6: Δsum ÷ Δcount),
//     which sees a queue as soon as the records that waited in it are
//     processed, bursts and all;
//   - the records that stayed unprocessed across two readings ÷ the rate
//     the shard processes them at, which sees a queue that is not being
//     processed at all (a stalled or collapsing shard reports no latency
//     for the records it has not reached);
//   - how much longer than working one takes a job waits for its worker
//     (jobs open ÷ jobs ending a second, less the least that was over
//     five minutes): past its knee a shard's log can stay short while the
//     work waits as jobs its workers cannot take, and instances stop
//     completing. A job-based user task is a person's work and left out.
//
// Over QueueTarget the shard is paced. Held by its job workers, new
// instances at most at the rate instances complete (less while the wait
// is over the target, more while it is under and the pace refused work:
// by probeGain under half the target, nearGain over). Held by its log, at most at the rate that brings its queue to
// the target, (capacity − (queue − target
// queue) ÷ drainTime) ÷ records written per instance, a token bucket on
// the placement path. Its capacity is the rate it processed at the last
// time it held a queue through a whole interval (what it can do now: a
// shard degrading past its knee processes less the longer its queue),
// raised by probeGain each interval in which the pace refused work while
// no queue stood (it can do more than it was last seen to: BBR probes
// its bottleneck the same way). Pacing ends after calmReadings readings
// under half the target in which it refused nothing: a load that fits
// is not refused, and one that does not keeps the shard paced instead of
// on and off every reading.
//
// A shard whose capacity is known is also never offered more than
// ceiling times it, paced or not: a step from the knee to three times
// it would otherwise build seconds of queue before the next reading,
// and a degrading shard loses its throughput to that queue. A shard not
// saturated within capacityWindow has no known capacity, and so no
// ceiling: a step from 10% to 60% of the knee is taken whole.
//
// Each proxy paces its own share of the shard's new instances (what it
// placed ÷ what the shard created), so replicas of the proxy add up to
// the shard's rate, not a multiple of it.

// Pacing constants.
const (
	DefaultQueueTarget = 250 * time.Millisecond
	// drainTime is how soon a queue over the target is paced back to it.
	drainTime = 3 * time.Second
	// ceiling is the most a shard is offered over its known capacity, and
	// probeGain how much its capacity is raised when the pace refused
	// work while no queue stood.
	ceiling   = 1.1
	probeGain = 1.25
	// nearGain is the probe's gain while the queue is under the target
	// but over half of it: a pace that refuses work there may sit below
	// what the shard can do (a worker fleet's wait does not fall when
	// its load does), so it rises, more gently, until the queue says it
	// is past.
	nearGain = 1.05
	// calmReadings under half the target, with nothing refused, end
	// pacing.
	calmReadings = 3
	// capacityWindow is how long a capacity measured under a queue is
	// believed without another.
	capacityWindow = 10 * time.Minute
	// minPacedRate is the fewest new instances a second a paced shard
	// gets per partition: enough to measure it by.
	minPacedRate = 1.0
	// kWeight is the weight of a reading in records per instance, an
	// average: one second of a bursty job stream says little.
	kWeight = 0.25
	// jobWindow is how far back the least time a job was open is taken:
	// what working one takes, without a queue.
	jobWindow = 5 * time.Minute
	// jobSamples is the fewest readings a job's wait is compared with.
	jobSamples = 10
	// jobTargets is how many queue targets a job may wait beyond what
	// working it takes before its shard is paced.
	jobTargets = 4
	// completionWeight is a reading's weight in the completion rate.
	completionWeight = 0.5
	// minShare is the least share of a shard's instances a proxy paces
	// for: one that placed none lately still gets a trickle.
	minShare = 0.05
	// burstTime is the bucket's depth, in time at its rate.
	burstTime = 250 * time.Millisecond
)

// pacingReading is one reading of a shard's log, for pacing.
type pacingReading struct {
	at                            time.Time
	lag, committed, processed     float64
	created, latencySum, latCount float64
	// root instances ended, jobs open and ended (not user tasks)
	ended, jobsOpen, jobsEnded float64
}

// pacer paces one shard's new instances. The placement path reads it
// lock-free (and the token bucket's own lock), the bucket only once
// capped is set; the admission loop updates it.
type pacer struct {
	capped  atomic.Bool // the bucket applies
	pacing  atomic.Bool // paced by its queue (placement prefers others)
	refused atomic.Bool // the bucket refused a placement since the last reading
	placed  atomic.Int64
	bucket  *rate.Limiter

	mu       sync.Mutex // the admission loop's
	prev     pacingReading
	havePrev bool
	paced    bool
	calm     int
	// capacity is records a second the shard processes (0: not known),
	// as measured under a queue at capacityAt or probed since.
	capacity   float64
	capacityAt time.Time
	perInst    float64 // records written per instance created (0: not seen yet)
	share      float64 // of the shard's new instances, this proxy's
	completion float64 // root instances ended a second, on average
	lastRate   float64 // the pace set last, for the whole shard (instances/s)
	// jobTimes are the times a job was open (Little's law), newest last,
	// within jobWindow: their least is what working a job takes.
	jobTimes signals.Series
}

// admits reports whether the shard takes a new instance at now.
func (pc *pacer) admits(now time.Time) bool {
	if !pc.capped.Load() || pc.bucket.TokensAt(now) >= 1 {
		return true
	}
	if !pc.refused.Load() {
		pc.refused.Store(true)
	}
	return false
}

// note counts n instances placed on the shard at now.
func (pc *pacer) note(now time.Time, n int64) {
	pc.placed.Add(n)
	if pc.capped.Load() {
		pc.bucket.ReserveN(now, int(min(n, int64(pc.bucket.Burst()))))
	}
}

// pacingStatus is what a reading made of the shard.
type pacingStatus struct {
	state       string  // proxyapi.AdmissionOpen or proxyapi.AdmissionPaced
	reason      string  // why it is paced ("" when not)
	queueDelay  float64 // seconds
	capacity    float64 // records a second it processes (0: not known)
	perInstance float64 // records written per instance
	rate        float64 // new instances a second this proxy gives it (0: no bound)
	changed     bool    // paced since this reading, or no longer
}

// observe takes a reading and sets the pace. Off, it paces nothing.
func (pc *pacer) observe(r pacingReading, target time.Duration, partitions int, off bool) pacingStatus {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.bucket == nil {
		// The zero pacer is ready: the bucket applies only once capped.
		pc.bucket, pc.share = rate.NewLimiter(rate.Inf, 1), 1
	}
	refused := pc.refused.Swap(false)
	placed := float64(pc.placed.Swap(0))
	prev, had := pc.prev, pc.havePrev
	pc.prev, pc.havePrev = r, true
	st := pacingStatus{state: proxyapi.AdmissionOpen, perInstance: pc.perInst}
	dt := r.at.Sub(prev.at).Seconds()
	if off || !had || dt <= 0 || r.committed < prev.committed || r.processed < prev.processed || r.created < prev.created || r.latCount < prev.latCount ||
		r.ended < prev.ended || r.jobsEnded < prev.jobsEnded {
		// No rate to read (a first reading, or a partition's leader
		// changed and its counters restarted): the last decision holds.
		st.state, st.capacity = pc.stateName(), pc.known(r.at)
		if off {
			pc.paced = false
			pc.pacing.Store(false)
			pc.capped.Store(false)
			st.state = proxyapi.AdmissionOpen
		}
		return st
	}
	processed, written := (r.processed-prev.processed)/dt, (r.committed-prev.committed)/dt
	created := r.created - prev.created
	standing := min(prev.lag, r.lag)
	// Saturated: a queue stood through the interval and the records it
	// processed waited in it (or none was processed). Records written
	// just before each reading stand too, and say nothing of its speed.
	var latency float64
	n := r.latCount - prev.latCount
	if n > 0 {
		latency = (r.latencySum - prev.latencySum) / n
	}
	saturated := standing >= congestedLag && (n == 0 || latency >= target.Seconds()/2)
	if saturated {
		// Zero too: a queue nothing is processed from.
		pc.capacity, pc.capacityAt = processed, r.at
	}
	capacity := pc.known(r.at)
	if created > 0 && written > 0 {
		k := written * dt / created
		if pc.perInst == 0 {
			pc.perInst = k
		} else {
			pc.perInst += kWeight * (k - pc.perInst)
		}
		pc.share += kWeight * (min(placed/created, 1) - pc.share)
	}
	st.perInstance, st.capacity = pc.perInst, capacity

	// What it processes: its capacity, or, not known, what it did.
	current := capacity
	if current == 0 {
		current = processed
	}
	// The queue delay: the latency the processed records report, or the
	// standing queue at the rate it is worked off.
	delay := latency
	switch {
	case standing > 0 && current > 0:
		delay = max(delay, standing/current)
	case saturated:
		delay = math.Inf(1) // a queue and nothing processed
	}
	pc.completion += completionWeight * ((r.ended-prev.ended)/dt - pc.completion)
	// A job's wait is held to jobTargets targets: a worker fleet's own
	// rhythm (batches, streams refilled) makes it noisier than the log's.
	jobWait := pc.jobWait(r, (r.jobsEnded-prev.jobsEnded)/dt) / jobTargets
	jobBound := jobWait > delay
	delay = max(delay, jobWait)
	st.queueDelay = delay

	if refused && !saturated && capacity > 0 && delay < target.Seconds()/2 && r.lag/capacity < target.Seconds()/2 {
		// The pace refused work the shard took without a queue: it
		// processes more than it was last seen to.
		pc.capacity = max(capacity, processed) * probeGain
		capacity = pc.capacity
		current = capacity
	}
	st.capacity = capacity

	was := pc.paced
	switch {
	case delay > target.Seconds():
		pc.paced, pc.calm = true, 0
	case pc.paced && delay < target.Seconds()/2 && !refused:
		if pc.calm++; pc.calm >= calmReadings {
			pc.paced, pc.calm = false, 0
		}
	default:
		pc.calm = 0
	}
	st.changed = pc.paced != was
	pc.pacing.Store(pc.paced)

	// The rate in records: paced, what brings the queue to the target
	// within drainTime; else a ceiling over the known capacity.
	// Held by its job workers, what completes, less while the jobs'
	// wait is over the target and more while it is under and the pace
	// refused work.
	var records, instances float64
	switch {
	case pc.paced && jobBound:
		gain := 1.0
		switch {
		case delay > target.Seconds():
			gain = 1 - min(0.5, (delay-target.Seconds())/drainTime.Seconds())
		case refused:
			gain = probe(delay, target)
		}
		instances = gain * pc.completion
	case pc.paced:
		records = current - (r.lag-target.Seconds()*current)/drainTime.Seconds()
	case capacity > 0:
		records = ceiling * capacity
	}
	st.state = pc.stateName()
	if pc.perInst > 0 && records > 0 {
		instances = records / pc.perInst
	}
	switch {
	case pc.paced && refused && delay <= target.Seconds():
		// Calm, and work was refused: the shard may take more than it
		// is measured to while paced (what it processes or completes
		// is what the pace lets it), so the pace probes up.
		instances = max(instances, probe(delay, target)*pc.lastRate)
	case pc.paced && !refused && delay <= target.Seconds():
		// The pace refused nothing: what the shard completed or
		// processed is what it was offered, not what it can do (a lull
		// in the load, or the end of one), and the pace holds.
		instances = max(instances, pc.lastRate)
	}
	if !pc.paced && (capacity == 0 || pc.perInst == 0) {
		// Nothing known to pace by.
		pc.capped.Store(false)
		return st
	}
	floor := minPacedRate * float64(max(partitions, 1))
	pc.lastRate = max(floor, instances)
	st.rate = pc.lastRate * max(pc.share, minShare)
	pc.bucket.SetLimitAt(r.at, rate.Limit(st.rate))
	pc.bucket.SetBurstAt(r.at, max(1, int(math.Ceil(st.rate*burstTime.Seconds()))))
	pc.capped.Store(true)
	switch {
	case pc.paced && jobBound:
		st.reason = fmt.Sprintf("jobs wait %s for their workers (target %s): %s new instances/s, what completes (%.1f/s)",
			human.Latency(delay*jobTargets), human.Latency(jobTargets*target.Seconds()), human.Rate(st.rate), pc.completion)
	case pc.paced:
		queue := "records not processed at all"
		if !math.IsInf(delay, 0) {
			queue = "queue " + human.Latency(delay)
		}
		st.reason = fmt.Sprintf("%s (target %s): %s new instances/s keep it there (%.0f records/s, %.1f an instance)",
			queue, human.Latency(target.Seconds()), human.Rate(st.rate), current, pc.perInst)
	}
	return st
}

// probe is how much a pace that refused work rises at a queue delay
// under the target: probeGain under half of it, nearGain over.
func probe(delay float64, target time.Duration) float64 {
	if delay < target.Seconds()/2 {
		return probeGain
	}
	return nearGain
}

// jobWait is how much longer than working one takes a job now waits for
// its worker: the jobs open ÷ those ending a second (Little's law), less
// what it was at the 10th percentile over jobWindow (a reading that found
// no job open says nothing of what working one takes). A job that takes
// its worker ten minutes by design is ten minutes' work, not a queue;
// the same job waiting longer than that is. 0 with no job ending, or
// fewer than jobSamples readings to compare with.
func (pc *pacer) jobWait(r pacingReading, ending float64) float64 {
	pc.jobTimes = pc.jobTimes.Since(r.at.Add(-jobWindow))
	if ending <= 0 {
		return 0
	}
	open := r.jobsOpen / ending
	pc.jobTimes = append(pc.jobTimes, signals.Point{T: r.at, V: open})
	if len(pc.jobTimes) < jobSamples {
		return 0
	}
	times := make([]float64, len(pc.jobTimes))
	for i, t := range pc.jobTimes {
		times[i] = t.V
	}
	slices.Sort(times)
	return max(0, open-times[len(times)/10])
}

func (pc *pacer) stateName() string {
	if pc.paced {
		return proxyapi.AdmissionPaced
	}
	return proxyapi.AdmissionOpen
}

// known is the capacity, while it is believed (0: not known).
func (pc *pacer) known(at time.Time) float64 {
	if at.Sub(pc.capacityAt) > capacityWindow {
		pc.capacity = 0
	}
	return pc.capacity
}
