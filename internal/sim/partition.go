package sim

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// class says how a command is queued.
type class int

const (
	// classCreate starts process instances: subject to backpressure, and
	// served first in --degrade mode.
	classCreate class = iota
	// classClient is any other client command: subject to backpressure.
	classClient
	// classExempt is a client command Zeebe's backpressure never rejects
	// (its RequestLimiter's white list): complete and fail job, cancel an
	// instance, deploy. Rejecting them would keep an overloaded partition
	// from ever working its backlog off.
	classExempt
	// classInternal is a follow-up record, a message between partitions or
	// a timer: never rejected.
	classInternal
)

type command struct {
	class   class
	written time.Time
	run     func()
}

// queue is a FIFO of commands.
type queue struct{ items []*command }

func (q *queue) push(c *command) { q.items = append(q.items, c) }
func (q *queue) len() int        { return len(q.items) }
func (q *queue) pop() *command {
	c := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items = q.items[:0:0] // let a drained burst's array go
	}
	return c
}

// partition is one Zeebe partition: a log of commands processed one at a
// time by its own goroutine (the stream processor), which alone touches
// the partition's state.
type partition struct {
	id      int32
	cluster *cluster
	keys    keyGenerator
	m       *partitionMetrics
	state   *state
	exp     *exported // what searches read

	mu       sync.Mutex
	front    queue // creations, ahead of work in --degrade mode
	work     queue
	wake     chan struct{}
	inflight int   // client commands accepted and not yet processed
	appended int64 // log position of the last written record
	// writeRate is flow control's write-rate limit (nil: none); it has a
	// lock of its own.
	writeRate *rate.Limiter

	processedPos int64 // processing goroutine only
	nextFree     time.Time
	// inHand: the processor has taken a record off the queue and holds it
	// back (capacity model, pause); set under mu as it is taken, so that
	// queueLen still counts it.
	inHand atomic.Bool
	// checkRequested: the cluster's timer asks for a due check (checkDue)
	// before the next record, every TimerInterval.
	checkRequested atomic.Bool

	pausedUntil atomic.Int64  // unix nanos; a GC-like stall
	slowFactor  atomic.Uint64 // math.Float64bits; 1 = normal speed
	resumed     chan struct{} // closed and replaced on resume
}

func errBackpressure() error {
	return status.Error(codes.ResourceExhausted, "Expected to handle gRPC request, but the broker rejected it: Reached maximum capacity of requests handled (backpressure)")
}

// enqueue writes a command to the partition's log. Client commands are
// rejected with RESOURCE_EXHAUSTED when the partition already holds
// --backlog-limit of them.
func (p *partition) enqueue(cl class, run func()) error {
	c := &command{class: cl, written: time.Now(), run: run}
	p.mu.Lock()
	if cl == classCreate || cl == classClient {
		p.m.received.Inc()
		if limit := p.cluster.cfg.BacklogLimit; limit > 0 && p.inflight >= limit {
			p.mu.Unlock()
			p.m.dropped.Inc()
			if p.m.refused != nil {
				p.m.refused.Inc()
			}
			return errBackpressure()
		}
		if p.writeRate != nil && !p.writeRate.Allow() {
			p.mu.Unlock()
			p.m.dropped.Inc()
			p.m.throttled.Inc()
			return errBackpressure()
		}
		if p.m.accepted != nil {
			p.m.accepted.Inc()
		}
		p.inflight++
		p.m.inflight.Set(float64(p.inflight))
	}
	if cl == classCreate && p.cluster.cfg.Degrade {
		p.front.push(c)
	} else {
		p.work.push(c)
	}
	p.appended++
	pos := p.appended
	p.mu.Unlock()
	p.m.appended.Set(float64(pos))
	// Records are committed as soon as they are written: one broker, no
	// replication to wait for.
	p.m.committed.Set(float64(pos))
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// appendFollowUps counts records a command wrote and processed in the same
// step (events following a command), so positions advance as Zeebe's do.
func (p *partition) appendFollowUps(n int64) {
	if p.writeRate != nil {
		// What processing writes is never refused, but it uses the
		// write rate up: client commands meet the limit sooner.
		p.writeRate.ReserveN(time.Now(), int(n))
	}
	p.mu.Lock()
	p.appended += n
	pos := p.appended
	p.mu.Unlock()
	p.m.appended.Set(float64(pos))
	p.m.committed.Set(float64(pos))
	p.processedPos += n
}

func (p *partition) next(stop <-chan struct{}) (*command, int) {
	for {
		if p.checkRequested.Swap(false) {
			p.checkDue()
		}
		p.mu.Lock()
		var c *command
		switch {
		case p.front.len() > 0:
			c = p.front.pop()
		case p.work.len() > 0:
			c = p.work.pop()
		}
		backlog := p.work.len()
		p.inHand.Store(c != nil)
		p.mu.Unlock()
		if c != nil {
			return c, backlog
		}
		select {
		case <-p.wake:
		case <-stop:
			return nil, 0
		}
	}
}

// run is the stream processor.
func (p *partition) run(stop <-chan struct{}) {
	for {
		c, backlog := p.next(stop)
		if c == nil {
			return
		}
		if !p.throttle(c, backlog, stop) {
			return
		}
		p.inHand.Store(false)
		// The command's backlog slot is freed before it runs, because
		// running it answers the client: a client that sends its next
		// command on the answer must find the slot free.
		if c.class == classCreate || c.class == classClient {
			p.mu.Lock()
			p.inflight--
			n := p.inflight
			p.mu.Unlock()
			p.m.inflight.Set(float64(n))
		}
		start := time.Now()
		p.m.latency.Observe(start.Sub(c.written).Seconds())
		c.run()
		p.m.commandDuration.Observe(time.Since(start).Seconds())
		p.processedPos++
		p.m.processed.Set(float64(p.processedPos))
		if p.m.exported != nil {
			p.m.exported.Set(float64(p.processedPos))
		}
	}
}

// minSleep batches the capacity model's waits: sleeping for every record
// at thousands per second would measure the timer, not the model.
const minSleep = time.Millisecond

// throttle applies the capacity model and injected faults before a record
// is processed. It returns false when the partition is stopping.
func (p *partition) throttle(c *command, backlog int, stop <-chan struct{}) bool {
	for {
		until := p.pausedUntil.Load()
		if until == 0 || time.Now().UnixNano() >= until {
			break
		}
		p.mu.Lock()
		resumed := p.resumed
		p.mu.Unlock()
		t := time.NewTimer(time.Until(time.Unix(0, until)))
		select {
		case <-t.C:
		case <-resumed:
			t.Stop()
		case <-stop:
			t.Stop()
			return false
		}
	}
	cfg := &p.cluster.cfg
	cost := 1.0
	if cfg.Degrade && c.class != classCreate && backlog > cfg.DegradeThreshold {
		// Past the knee every record costs more the longer the backlog,
		// up to DegradeMax: the work behind new instances collapses while
		// new instances are still accepted, and a backlog drains at a
		// pace that does not depend on how long it grew.
		cost = min(cfg.DegradeMax, cost+float64(backlog-cfg.DegradeThreshold)/float64(cfg.DegradeThreshold))
	}
	slow := p.slowdown()
	var per time.Duration
	switch {
	case cfg.Capacity > 0:
		per = time.Duration(cost * slow * float64(time.Second) / cfg.Capacity)
	case slow > 1:
		// As fast as possible, slowed: a nominal 20µs per record.
		per = time.Duration((slow - 1) * float64(20*time.Microsecond))
	default:
		return true
	}
	now := time.Now()
	if p.nextFree.Before(now) {
		p.nextFree = now
	}
	p.nextFree = p.nextFree.Add(per)
	if wait := p.nextFree.Sub(now); wait >= minSleep {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return false
		}
	}
	return true
}

func (p *partition) slowdown() float64 {
	f := float64frombits(p.slowFactor.Load())
	if f < 1 {
		return 1
	}
	return f
}

// queueLen is the number of records written and not yet processed: those
// queued and one the processor holds back.
func (p *partition) queueLen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.front.len() + p.work.len()
	if p.inHand.Load() {
		n++
	}
	return n
}

func float64frombits(b uint64) float64 { return math.Float64frombits(b) }
