package signals

import (
	"fmt"
	"math"
	"time"

	"github.com/shardctl/shardctl/internal/human"
)

// Emptying is how something that is going down reaches zero, read from
// its own recent pace: for a backlog, the leading indicator of recovery
// (completions stay near zero until the records ahead of them are done).
type Emptying struct {
	PerSec  float64 // how fast it falls, > 0
	Seconds float64 // until empty at that pace
	// Low and High bound Seconds by the pace's standard error, two of
	// them either way; High is +Inf when the pace may be nil.
	Low, High float64
	R2        float64 // of the fit the pace is read from
}

// Certain says whether the fit is good enough for a point; else a range
// is the honest answer.
func (e Emptying) Certain(minR2 float64) bool {
	return e.R2 >= minR2 && !math.IsInf(e.High, 1) && e.High <= 1.5*e.Low
}

// When says when something empties: a point when the fit is good, else
// a range.
func When(e Emptying, th Thresholds) string {
	return etaText(e.Certain(th.QueueR2), e.Seconds, e.Low, e.High)
}

// EmptyIn reads how s empties: a line fitted from its highest point
// within recent (a fall is read from where it began, not diluted by the
// rise before it), over at least a sixth of recent and three points, or
// over five points or more that clearly fall (a turn is read as soon
// as it shows), else over all of recent; and when the last quarter of
// recent falls faster than that line, at that pace (a backlog drains
// faster as it shrinks). ok is false when the line does not fall.
func EmptyIn(s Series, now time.Time, recent time.Duration) (e Emptying, ok bool) {
	part := s.Since(now.Add(-recent))
	if len(part) < 3 {
		return Emptying{}, false
	}
	peak := 0
	for i, p := range part {
		if p.V >= part[peak].V {
			peak = i
		}
	}
	if fall := part[peak:]; len(fall) >= 3 && (fall[len(fall)-1].T.Sub(fall[0].T) >= recent/6 || turned(fall)) {
		part = fall
	}
	f := LinearFit(part)
	if last := part.Since(now.Add(-recent / 4)); len(last) >= 3 && len(last) < len(part) && f.Slope < 0 {
		if g := LinearFit(last); g.Slope < f.Slope {
			part, f = last, g
		}
	}
	// What is left is read off the line, not the last sample: a queue
	// jumps with each batch of commands written (job completions), and
	// the line is where it is heading.
	last := part[len(part)-1]
	left := f.Intercept + f.Slope*last.T.Sub(part[0].T).Seconds()
	if f.Slope >= 0 || last.V <= 0 {
		return Emptying{}, false
	}
	left = max(left, 0)
	pace := -f.Slope
	e = Emptying{PerSec: pace, Seconds: left / pace, R2: f.R2, High: math.Inf(1)}
	e.Low = left / (pace + 2*f.SlopeErr)
	if slow := pace - 2*f.SlopeErr; slow > 0 {
		e.High = left / slow
	}
	return e, true
}

// turnR2 is how well the points after a peak must sit on a line for a
// short fall to count as the queue turning, not as noise after a high
// sample.
const turnR2 = 0.8

// turned says whether the points from a peak clearly fall: five at
// least, on a line (R² ≥ turnR2) that falls by more than twice its
// slope's standard error. (Four would be read sooner, but a queue that
// rises through noise shows four such points after a high sample five
// times as often: 2% of the time, against 0.4%.)
func turned(fall Series) bool {
	if len(fall) < 5 {
		return false
	}
	f := LinearFit(fall)
	return f.R2 >= turnR2 && f.Slope+2*f.SlopeErr < 0
}

// Recovery is when a shard will have caught up: the records queued ahead
// of its work processed at the pace the queue falls now, then the
// instances it owes (the debt) completed at the pace it pays them.
//
// That pace is read, best first, from what the shard completes now, once
// its queue is empty and completions lead creations (it is paying the
// debt); else from a debt it paid earlier in the window (its best five
// seconds); else from the most instances it created and completed
// together a second over its best five seconds, once it has shown that
// it completes what it creates: one step each, as a shard whose load
// stopped puts the steps that went into new instances into the debt.
// A shard that has completed nothing yet (a burst from idle: it only
// took new instances in, which is the cheap step) has shown how fast it
// takes instances in, not how fast it completes them, which for a
// process of several tasks is several steps each: its debt is reckoned
// at the pace its queue falls, one record per instance owed (the fastest
// it has fallen over 10 s in the last minute, when more than its line:
// the line slows as the shard's work on the debt writes job completions
// back into the queue in batches). With a load still on, each instance
// created takes a step and adds one to the debt.
type Recovery struct {
	Seconds float64 `json:"seconds"`
	// LowSeconds and HighSeconds are the range the queue's fit allows;
	// HighSeconds is null when the fit cannot bound it.
	LowSeconds  float64  `json:"lowSeconds"`
	HighSeconds *float64 `json:"highSeconds"`
	// Certain: the fit is good enough to quote Seconds; else quote the
	// range.
	Certain bool `json:"certain"`
	// BacklogSeconds is the queue's part, DebtSeconds what the debt takes
	// once the queue is empty.
	BacklogSeconds float64 `json:"backlogSeconds"`
	DebtSeconds    float64 `json:"debtSeconds"`
	// QueueDrainPerSec is the pace the queue falls at (records/s);
	// PacePerSec the instances created and completed together a second
	// the debt is reckoned at, and PaceFrom where that pace was read
	// (PaceNow, PacePaid, PaceShown or PaceQueue).
	QueueDrainPerSec float64 `json:"queueDrainPerSec"`
	PacePerSec       float64 `json:"pacePerSec"`
	PaceFrom         string  `json:"paceFrom"`
}

// Where a debt's pace is read from, best first.
const (
	PaceNow   = "completing now"      // the queue is empty and completions lead: the debt is being paid
	PacePaid  = "a debt paid earlier" // the best five seconds of a debt paid earlier in the window
	PaceShown = "steps shown"         // the best five seconds of created and completed, one step each
	PaceQueue = "the queue's pace"    // nothing completed yet: one record per instance owed, at the fastest the queue falls
)

// When says the ETA as a person reads it: a point when the fit is good,
// else a range.
func (r Recovery) When() string {
	high := math.Inf(1)
	if r.HighSeconds != nil {
		high = *r.HighSeconds
	}
	return etaText(r.Certain, r.Seconds, r.LowSeconds, high)
}

// etaText is an ETA in words: ~point when certain, else low–high, or
// "at least low" when high is unbounded.
func etaText(certain bool, seconds, low, high float64) string {
	switch {
	case certain:
		return "~" + human.Seconds(seconds)
	case math.IsInf(high, 1):
		return "at least " + human.Seconds(low)
	}
	return human.Seconds(low) + "–" + human.Seconds(high)
}

// Terms says the ETA's parts in the order they come, each with its time,
// so that the one that dominates shows.
func (r Recovery) Terms() string {
	backlog := "backlog ahead of the work: ~" + human.Seconds(r.BacklogSeconds)
	switch {
	case r.DebtSeconds < 1:
		return backlog
	case r.BacklogSeconds < 1:
		return "debt: ~" + human.Seconds(r.DebtSeconds)
	}
	return fmt.Sprintf("%s, then debt: ~%s", backlog, human.Seconds(r.DebtSeconds))
}

// recoveryOf estimates when a shard catches up, or says it is not
// recovering (nil). emptying is how its queue empties (nil when it does
// not fall); debt is the instances owed; created and completed the rates
// now, which the estimate leans on.
func recoveryOf(s Shard, now time.Time, emptying *Emptying, debt, created, completed float64, th Thresholds) *Recovery {
	queue := zeroNaN(s.Queue.Last())
	r := &Recovery{}
	r.PacePerSec, r.PaceFrom = paceOf(s, now, emptying, th)
	if queue > th.QueueEmpty {
		if emptying == nil {
			return nil
		}
		e := *emptying
		r.BacklogSeconds, r.QueueDrainPerSec = e.Seconds, e.PerSec
		r.LowSeconds, r.Certain = e.Low, e.Certain(th.QueueR2)
		if !math.IsInf(e.High, 1) {
			r.HighSeconds = ptr(e.High)
		}
		// What completes while the queue drains pays part of the debt.
		debt = max(0, debt-(completed-created)*e.Seconds)
	} else if debt < 1 || completed <= created && !justEmptied(s.Queue, now, th) {
		// Nothing queued, nothing owed; or owed and nothing says it is
		// being paid: no queue emptied lately, completions not ahead.
		return nil
	}
	if debt >= 1 {
		// Each instance created now costs the pace a step and adds to
		// the debt: what is left for the debt is pace − 2 × created, or
		// what completions pay now when that is more.
		net := max(r.PacePerSec-2*created, completed-created)
		if net <= 0 {
			return nil
		}
		r.DebtSeconds = debt / net
	}
	r.Seconds = r.BacklogSeconds + r.DebtSeconds
	r.LowSeconds += r.DebtSeconds
	if r.HighSeconds != nil {
		*r.HighSeconds += r.DebtSeconds
	}
	if queue <= th.QueueEmpty {
		r.LowSeconds, r.Certain = r.Seconds, true
		r.HighSeconds = ptr(r.Seconds)
	}
	return r
}

// paceOf is the instances created and completed together a second that
// a shard's debt is reckoned at, and where that was read (Recovery says
// in which order).
func paceOf(s Shard, now time.Time, emptying *Emptying, th Thresholds) (float64, string) {
	paying := payingSteps(s, th)
	if run := payingNow(paying, now); run != nil {
		return run.Mean(), PaceNow
	}
	if best := bestRun(paying, latest); best >= th.MinRate {
		return best, PacePaid
	}
	if keptUp(s.Created, s.Completed, th) {
		return bestMean(SumSeries(s.Created, s.Completed), latest), PaceShown
	}
	if emptying != nil {
		// The queue's line slows as the shard's own work on the debt
		// (jobs completed in batches) writes records back into it; the
		// pace it works through records shows between those batches.
		return max(emptying.PerSec, fastestFall(s.Queue, now, th.Recent, 2*latest)), PaceQueue
	}
	return 0, PaceQueue
}

// fastestFall is the fastest q fell over a span of d within recent
// (records/s; 0 when it did not fall).
func fastestFall(q Series, now time.Time, recent, d time.Duration) float64 {
	part := q.Since(now.Add(-recent))
	var best float64
	j := 0
	for _, p := range part {
		for p.T.Sub(part[j].T) > d {
			j++
		}
		if dt := p.T.Sub(part[j].T); dt > 0 && dt >= d*9/10 {
			best = max(best, (part[j].V-p.V)/dt.Seconds())
		}
	}
	return best
}

// payingNow is the run of paying steps the series ends with, back to
// latest ago (three steps at least, however far apart they are), or nil
// when it has fewer than three. The first step of a run that began in
// the series is left out: the debt began to be paid part way through it.
func payingNow(paying Series, now time.Time) Series {
	start := len(paying)
	for start > 0 && paying[start-1].V > 0 {
		start--
	}
	run := paying[start:]
	if start > 0 && len(run) > 0 {
		run = run[1:]
	}
	if len(run) < 3 {
		return nil
	}
	if recent := run.Since(now.Add(-latest)); len(recent) >= 3 {
		return recent
	}
	return run[len(run)-3:]
}

// payingSteps are the instances created and completed at each step where
// the shard was paying a debt (its queue empty, completions well ahead
// of creations: a quarter more, and MinRate more at least), 0 elsewhere.
func payingSteps(s Shard, th Thresholds) Series {
	made, queued := byTime(s.Created), byTime(s.Queue)
	out := make(Series, 0, len(s.Completed))
	for _, p := range s.Completed {
		c := made[p.T.UnixNano()]
		q, ok := queued[p.T.UnixNano()]
		v := 0.0
		if ok && q <= th.QueueEmpty && p.V >= c+th.MinRate && p.V*th.PlanRatio >= c {
			v = c + p.V
		}
		out = append(out, Point{p.T, v})
	}
	return out
}

// keptUp says whether the shard completed, at some step, what it
// created there (PlanRatio of it, at MinRate at least).
func keptUp(created, completed Series, th Thresholds) bool {
	made := byTime(created)
	for _, p := range completed {
		if c := made[p.T.UnixNano()]; c >= th.MinRate && p.V >= th.PlanRatio*c {
			return true
		}
	}
	return false
}

// byTime is a series' values by the instant of their sample, to read two
// series step by step.
func byTime(s Series) map[int64]float64 {
	out := make(map[int64]float64, len(s))
	for _, p := range s {
		out[p.T.UnixNano()] = p.V
	}
	return out
}

// bestRun is the highest mean of s over a span of length d whose every
// step is above 0 (0 when none is).
func bestRun(s Series, d time.Duration) float64 {
	var best float64
	for start := 0; start < len(s); {
		end := start
		for end < len(s) && s[end].V > 0 {
			end++
		}
		if run := s[start:end]; len(run) > 0 && run[len(run)-1].T.Sub(run[0].T) >= d {
			best = max(best, bestMean(run, d))
		}
		start = end + 1
	}
	return best
}

// bestMean is the highest mean of s over any span of length d in it: the
// best pace the series has kept up for that long (its mean when shorter).
func bestMean(s Series, d time.Duration) float64 {
	if len(s) == 0 || s[len(s)-1].T.Sub(s[0].T) < d {
		return zeroNaN(s.Mean())
	}
	var best, sum float64
	j := 0
	for i, p := range s {
		sum += p.V
		for p.T.Sub(s[j].T) >= d {
			sum -= s[j].V
			j++
		}
		if p.T.Sub(s[0].T) >= d {
			best = max(best, sum/float64(i-j+1))
		}
	}
	return best
}

// justEmptied: the queue held a backlog within the last minute, and so
// the completions it held back are about to come.
func justEmptied(q Series, now time.Time, th Thresholds) bool {
	for _, p := range q.Since(now.Add(-th.Recent)) {
		if p.V > th.QueueEmpty {
			return true
		}
	}
	return false
}
