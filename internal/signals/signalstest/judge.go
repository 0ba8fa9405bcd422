package signalstest

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/signals"
)

// Event names a recording's Judge reads: a recovery begins (the load
// stopped or lowered below the knee), its debt is measured paid, the load
// rises again.
const (
	EventRecover  = "recover"
	EventPaid     = "paid"
	EventOverload = "overload"
)

// Eval is what the advisor said of the shard at one evaluation.
type Eval struct {
	At  time.Time
	Sig signals.Signals
}

// Verdict is each evaluation of a recovery judged, in words, and what
// failed.
type Verdict struct {
	Lines    []string
	Failures []string
	// Errors are the ETAs' errors as a share of the recovery's length.
	Errors []float64
	// Judged and Within count the evaluations JudgeFromPeak judged and
	// those within its bar.
	Judged, Within int
}

// ETAError is the bar an ETA is held to: the moment it says the debt will
// be paid within this share of the recovery's length (from the load
// stopped or lowered to the debt paid) of when it was, or within ETASlack
// when that is more (the bar: 20% or 10 s). OKAfter is how soon
// after the debt is paid the level must be ok.
const (
	ETAError = 0.2
	ETASlack = 10 * time.Second
	OKAfter  = 15 * time.Second
)

// Judge checks what the advisor said against what happened in the run:
// from the first ETA of each recovery to its debt paid, every evaluation
// gives an ETA that puts the end of the recovery within ETAError of its
// length of the end measured (or ETASlack); no reason says the queue
// grows while the recorded queue's last minute falls; and from OKAfter
// past the debt paid until the load rises again, the level is ok. Errors are kept against
// the recovery's length; the lines also show them against the time left.
//
// Evaluations within FallShows of a recovery's start are shown, not
// judged: the advisor's samples show the load's step only then.
//
// tolerance is the ETA error that fails (ETASlack still holds); errors
// over ETAError and within it are marked in the lines, not failed.
func Judge(r Recording, evals []Eval, th signals.Thresholds, tolerance float64) Verdict {
	var v Verdict
	fail := func(format string, a ...any) { v.Failures = append(v.Failures, fmt.Sprintf(format, a...)) }
	phases := r.phases()
	for _, e := range evals {
		// Direction first, against the recorded queue's last minute.
		q := r.Until(e.At, th.Recent).Queue
		if f := signals.LinearFit(q); len(q) >= 3 && f.Slope < 0 {
			for _, reason := range e.Sig.Reasons {
				if strings.Contains(reason, "growing") {
					fail("%s: %q while the queue's last minute falls at %.1f records/s", e.At.Format(time.TimeOnly), reason, f.Slope)
				}
			}
		}
	}
	for i, p := range phases {
		if p.paid.IsZero() {
			fail("recovery %d (from %s): its debt was never measured paid", i+1, p.from.Format(time.TimeOnly))
			continue
		}
		length := p.paid.Sub(p.from)
		v.Lines = append(v.Lines, fmt.Sprintf("recovery %d: from %s, paid %s later", i+1, p.from.Format(time.TimeOnly), length.Round(time.Second)))
		seen := false
		for _, e := range evals {
			if e.At.Before(p.from) || !e.At.Before(p.until) {
				continue
			}
			since := e.At.Sub(p.from).Round(time.Second)
			left := p.paid.Sub(e.At)
			rec := e.Sig.Recovery
			if e.At.Sub(p.from) < FallShows && left > 0 {
				// As JudgeFromPeak's turn: the load's step shows in the
				// advisor's samples only so many of them later; before,
				// the rate it reads is the one that stopped.
				v.Lines = append(v.Lines, fmt.Sprintf("  +%-5v before the step shows: %s; actual %v", since, etaOf(rec), left.Round(time.Second)))
				continue
			}
			switch {
			case left > 0 && rec == nil && seen:
				fail("recovery %d +%v: no ETA, %v before the debt was paid", i+1, since, left.Round(time.Second))
				v.Lines = append(v.Lines, fmt.Sprintf("  +%-5v no ETA; actual %v; %s, %q", since, left.Round(time.Second), e.Sig.Level, e.Sig.Reasons))
			case left > 0 && rec != nil:
				seen = true
				eta := time.Duration(rec.Seconds * float64(time.Second))
				rel := (eta - left).Seconds() / length.Seconds()
				v.Errors = append(v.Errors, rel)
				mark := ""
				if math.Abs(rel) > ETAError && (eta-left).Abs() > ETASlack {
					mark = "  <- over the bar"
				}
				if math.Abs(rel) > tolerance && (eta-left).Abs() > ETASlack {
					mark = "  <- off"
					fail("recovery %d +%v: ETA %v, actual %v: off by %+.0f%% of the recovery's %v", i+1, since, eta.Round(time.Second), left.Round(time.Second), rel*100, length.Round(time.Second))
				}
				v.Lines = append(v.Lines, fmt.Sprintf("  +%-5v ETA %-6v (backlog %v, debt %v) actual %-6v %+4.0f%% of the recovery (%+.0f%% of the time left)  %s%s", since, eta.Round(time.Second),
					time.Duration(rec.BacklogSeconds*float64(time.Second)).Round(time.Second), time.Duration(rec.DebtSeconds*float64(time.Second)).Round(time.Second),
					left.Round(time.Second), rel*100, 100*(eta-left).Seconds()/left.Seconds(), e.Sig.Level, mark))
			case left <= -OKAfter && e.Sig.Level != signals.OK:
				fail("recovery %d: %s %v after the debt was paid: %q", i+1, e.Sig.Level, (-left).Round(time.Second), e.Sig.Reasons)
			case left <= 0:
				v.Lines = append(v.Lines, fmt.Sprintf("  +%-5v paid %v ago: %s", since, (-left).Round(time.Second), e.Sig.Level))
			default:
				v.Lines = append(v.Lines, fmt.Sprintf("  +%-5v no ETA yet; actual %v; %s", since, left.Round(time.Second), e.Sig.Level))
			}
		}
		if !seen {
			fail("recovery %d: no ETA at all", i+1)
		}
	}
	return v
}

type phase struct{ from, paid, until time.Time }

// phases are the recoveries of a run: from each EventRecover to the
// EventPaid after it, judged until the next EventOverload (or the end).
func (r Recording) phases() []phase {
	var out []phase
	for i, e := range r.Events {
		if e.What != EventRecover {
			continue
		}
		p := phase{from: e.At, until: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}
		for _, n := range r.Events[i+1:] {
			if n.What == EventPaid && p.paid.IsZero() {
				p.paid = n.At
			}
			if n.What == EventOverload || n.What == EventRecover {
				p.until = n.At
				break
			}
		}
		out = append(out, p)
	}
	return out
}

// The bars of a recovery read from its queue's peak on: at least
// PeakShare of the evaluations from the first after the peak to the debt
// paid give an ETA within ETAError of the time actually left, or within
// ETASlack when that is more; and the level is not ok until ETASlack
// before the debt is paid (an ETA that close is as good as paid). An
// evaluation is after the peak once the fall has shown for FallShows:
// five samples a second apart, the fewest the advisor tells a turn from
// noise by, and a second more, as the advisor's own scrape samples up to
// a second apart from the recording's.
const (
	PeakShare = 0.8
	FallShows = 5 * time.Second
)

// JudgeFromPeak checks what the advisor said of each recovery against the
// recovery measured, as an operator reads it from the moment the queue
// turns: from the first evaluation FallShows after the recorded queue's
// peak to the debt paid, at least PeakShare of the evaluations give an
// ETA within ETAError of the time left (or ETASlack), an evaluation that
// says the shard has caught up (no ETA, no debt) giving 0; from then on
// no reason says the queue grows; and from the load's stop until
// ETASlack before the debt was paid, the level is not ok. Judged and
// Within count the evaluations after the peak and those within the bar.
//
// tolerance is the ETA error an evaluation is counted within, as in
// Judge: ETAError for a recording, more for a live run on a busy
// machine, whose lines still mark each ETA over ETAError.
func JudgeFromPeak(r Recording, evals []Eval, th signals.Thresholds, tolerance float64) Verdict {
	var v Verdict
	fail := func(format string, a ...any) { v.Failures = append(v.Failures, fmt.Sprintf(format, a...)) }
	for i, p := range r.phases() {
		if p.paid.IsZero() {
			fail("recovery %d (from %s): its debt was never measured paid", i+1, p.from.Format(time.TimeOnly))
			continue
		}
		peak, top := r.peak(p.from, p.paid)
		v.Lines = append(v.Lines, fmt.Sprintf("recovery %d: from %s, the queue's peak (%.0f) %v later, paid %v later", i+1,
			p.from.Format(time.TimeOnly), top, peak.Sub(p.from).Round(time.Second), p.paid.Sub(p.from).Round(time.Second)))
		judged, within := 0, 0
		for _, e := range evals {
			if e.At.Before(p.from) || !e.At.Before(p.until) {
				continue
			}
			since := e.At.Sub(p.from).Round(time.Second)
			left := p.paid.Sub(e.At)
			after := !e.At.Before(peak.Add(FallShows))
			if after {
				for _, reason := range e.Sig.Reasons {
					if strings.Contains(reason, "growing") {
						fail("recovery %d +%v: %q after the queue's peak", i+1, since, reason)
					}
				}
			}
			if left > ETASlack && e.Sig.Level == signals.OK {
				fail("recovery %d +%v: ok %v before the debt was paid (debt %.0f, queue %.0f): %q", i+1, since, left.Round(time.Second), e.Sig.Debt, e.Sig.Queue, e.Sig.Reasons)
			}
			if left <= 0 {
				v.Lines = append(v.Lines, fmt.Sprintf("  +%-5v paid %v ago: %s", since, (-left).Round(time.Second), e.Sig.Level))
				continue
			}
			state := fmt.Sprintf("%s, queue %.0f, debt %.0f", e.Sig.Level, e.Sig.Queue, e.Sig.Debt)
			if !after {
				v.Lines = append(v.Lines, fmt.Sprintf("  +%-5v before the turn shows: %s; actual %v; %s", since, etaOf(e.Sig.Recovery), left.Round(time.Second), state))
				continue
			}
			judged++
			mark := "  <- off"
			eta, ok := time.Duration(0), e.Sig.Debt < 1 && e.Sig.Queue <= th.QueueEmpty // caught up, it says
			if rec := e.Sig.Recovery; rec != nil {
				eta, ok = time.Duration(rec.Seconds*float64(time.Second)), true
			}
			bar := func(share float64) time.Duration { return max(time.Duration(share*float64(left)), ETASlack) }
			if off := (eta - left).Abs(); ok && off <= bar(tolerance) {
				within++
				mark = ""
				if off > bar(ETAError) {
					mark = "  <- over the bar"
				}
			}
			v.Lines = append(v.Lines, fmt.Sprintf("  +%-5v %s; actual %v; %s%s", since, etaOf(e.Sig.Recovery), left.Round(time.Second), state, mark))
		}
		v.Judged += judged
		v.Within += within
		switch {
		case judged == 0:
			fail("recovery %d: no evaluation between the queue's peak and the debt paid", i+1)
		case float64(within) < PeakShare*float64(judged):
			fail("recovery %d: %d of %d ETAs after the queue's peak within %.0f%% (or %v) of the time left, want %.0f%%",
				i+1, within, judged, 100*tolerance, ETASlack, 100*PeakShare)
		}
	}
	return v
}

// etaOf says an ETA and its terms, or that there is none.
func etaOf(rec *signals.Recovery) string {
	if rec == nil {
		return "no ETA"
	}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)).Round(time.Second) }
	return fmt.Sprintf("ETA %v (backlog %v, debt %v)", sec(rec.Seconds), sec(rec.BacklogSeconds), sec(rec.DebtSeconds))
}

// peak is when the recorded queue was highest between from and to, and
// how high.
func (r Recording) peak(from, to time.Time) (time.Time, float64) {
	at, top := from, math.Inf(-1)
	for _, q := range r.Queue {
		t := r.Start.Add(time.Duration(q[0] * float64(time.Second)))
		if !t.Before(from) && !t.After(to) && q[1] > top {
			at, top = t, q[1]
		}
	}
	return at, top
}
