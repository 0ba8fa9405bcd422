package signals

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// at1s builds a series at 1 s steps over d from f(seconds since start).
func at1s(d time.Duration, f func(s float64) float64) Series {
	var out Series
	for s := 0.0; s <= d.Seconds(); s++ {
		out = append(out, Point{t0.Add(time.Duration(s) * time.Second), f(s)})
	}
	return out
}

func TestEmptyIn(t *testing.T) {
	const d = 2 * time.Minute
	now := t0.Add(d)
	for _, tc := range []struct {
		name    string
		s       Series
		ok      bool
		seconds float64 // want: ±10% when certain, else within the range
		certain bool
	}{
		// Rose for 90 s, falls at 20/s since: read from the peak, not
		// diluted by the rise.
		{"rise then fall", at1s(d, func(x float64) float64 {
			if x < 90 {
				return 10 * x
			}
			return 900 - 20*(x-90)
		}), true, 300.0 / 20, true},
		// Rose for two minutes less 5 s, falls at 85/s since: the turn is
		// read from five samples, as soon as it shows.
		{"turned 5 s ago", at1s(d, func(x float64) float64 {
			if x < 115 {
				return 40 * x
			}
			return 4600 - 85*(x-115)
		}), true, (4600 - 85*5) / 85.0, true},
		{"still rising", at1s(d, func(x float64) float64 { return 5 * x }), false, 0, false},
		{"flat", at1s(d, func(float64) float64 { return 400 }), false, 0, false},
		{"falling through noise", at1s(d, noisy(3, 150, func(x float64) float64 { return 3000 - 10*x })), true, 1800.0 / 10, true},
		{"falling through more noise", at1s(d, noisy(3, 500, func(x float64) float64 { return 3000 - 10*x })), true, 1800.0 / 10, false},
		{"too short", Series{{t0, 5}, {t0.Add(time.Second), 4}}, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := EmptyIn(tc.s, now, time.Minute)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v: %+v", ok, tc.ok, e)
			}
			if !ok {
				return
			}
			switch {
			case tc.certain && math.Abs(e.Seconds-tc.seconds) > 0.1*tc.seconds:
				t.Errorf("empty in %.1f s, want %.1f", e.Seconds, tc.seconds)
			case !tc.certain && !(e.Low <= tc.seconds && tc.seconds <= e.High):
				t.Errorf("empty in %.1f–%.1f s, which leaves out the %.1f s it takes", e.Low, e.High, tc.seconds)
			}
			if !(e.Low <= e.Seconds && e.Seconds <= e.High) {
				t.Errorf("range %.1f–%.1f does not hold %.1f", e.Low, e.High, e.Seconds)
			}
			if got := e.Certain(DefaultThresholds().QueueR2); got != tc.certain {
				t.Errorf("certain %v, want %v (R² %.2f, %.1f–%.1f s)", got, tc.certain, e.R2, e.Low, e.High)
			}
		})
	}
}

// A queue that rises through noise shows a few lower samples after a high
// one now and then; read a second apart, they are not a turn.
func TestEmptyInNoTurnInNoise(t *testing.T) {
	const d, seeds = 2 * time.Minute, 2000
	falls := 0
	for seed := uint64(1); seed <= seeds; seed++ {
		s := at1s(d, noisy(seed, 400, func(x float64) float64 { return 3000 + 40*x }))
		if _, ok := EmptyIn(s, t0.Add(d), time.Minute); ok {
			falls++
		}
	}
	if falls > seeds/100 {
		t.Errorf("%d of %d queues rising at 40/s through ±400 read as falling", falls, seeds)
	}
}

func TestBestMean(t *testing.T) {
	s := at1s(5*time.Minute, func(x float64) float64 {
		if x >= 100 && x < 160 {
			return 50
		}
		return 10
	})
	if got := bestMean(s, time.Minute); math.Abs(got-50) > 0.01 {
		t.Errorf("best one-minute mean %v, want 50", got)
	}
	if got := bestMean(s[:30], time.Minute); math.Abs(got-10) > 0.01 {
		t.Errorf("shorter than the span: %v, want its mean 10", got)
	}
	if got := bestMean(nil, time.Minute); got != 0 {
		t.Errorf("empty: %v", got)
	}
}

// The shapes of the way down: a degraded shard overloaded, then its load
// stopped, or lowered under the knee. The ETA leans on the queue's fall
// and the best completion rate shown; reasons follow the last minute.
func TestOnTheWayDown(t *testing.T) {
	const window = 10 * time.Minute
	th := DefaultThresholds()
	// 0-300 s: 40/s, all completed. 300-360 s: 110/s offered, completions
	// collapse to 5/s and the queue grows 300 records/s: the pace shown is
	// 115 instances created and completed a second. From 360 s: the load
	// stopped; the queue falls at 150/s until empty (480 s), then
	// completions burst at that pace until the debt is paid.
	const pace = 110 + 5
	debtAt360 := 60.0 * (110 - 5)
	burstEnd := 480 + (debtAt360-5*120)/pace
	stopped := Shard{
		Name: "s",
		Created: at1s(window, func(x float64) float64 {
			switch {
			case x < 300:
				return 40
			case x < 360:
				return 110
			}
			return 0
		}),
		Completed: at1s(window, func(x float64) float64 {
			switch {
			case x < 300:
				return 40
			case x < 480:
				return 5
			case x < burstEnd:
				return pace
			}
			return 0
		}),
		Queue: at1s(window, func(x float64) float64 {
			switch {
			case x < 300:
				return 20
			case x < 360:
				return 20 + 300*(x-300)
			}
			return max(0, 18020-150*(x-360))
		}),
	}
	for _, tc := range []struct {
		name  string
		at    float64 // seconds
		check func(t *testing.T, s Signals)
	}{
		{"growing past the knee", 355, func(t *testing.T, s Signals) {
			if !s.QueueGrowing || s.Level != Critical || s.Recovering {
				t.Errorf("growing %v, level %v, recovering %v: %q", s.QueueGrowing, s.Level, s.Recovering, s.Reasons)
			}
		}},
		{"30 s after the stop: falling, not growing", 390, func(t *testing.T, s Signals) {
			for _, r := range s.Reasons {
				if strings.Contains(r, "growing") {
					t.Errorf("a growing reason while the queue falls: %q", s.Reasons)
				}
			}
			if !s.QueueFalling || !hasReason(s.Reasons, "queue falling: -150 records/s") {
				t.Errorf("falling %v, reasons %q", s.QueueFalling, s.Reasons)
			}
			// Queue 13,520 at 150/s is 90 s; then the debt (6,300 less 5/s
			// paid meanwhile) at the pace shown.
			wantBacklog := 13520.0 / 150
			wantDebt := (debtAt360 - 5*30 - 5*wantBacklog) / pace
			if s.Recovery == nil || math.Abs(s.Recovery.BacklogSeconds-wantBacklog) > 3 {
				t.Fatalf("recovery %+v, want the backlog's term %.0f s", s.Recovery, wantBacklog)
			}
			if math.Abs(s.Recovery.DebtSeconds-wantDebt) > 0.1*wantDebt {
				t.Errorf("debt term %.0f s, want ~%.0f", s.Recovery.DebtSeconds, wantDebt)
			}
			if !hasReason(s.Reasons, "backlog ahead of the work: ~1m30s, then debt") {
				t.Errorf("reasons %q", s.Reasons)
			}
		}},
		{"the burst: only the debt left", 500, func(t *testing.T, s Signals) {
			left := burstEnd - 500
			if s.Recovery == nil || s.Recovery.BacklogSeconds != 0 || math.Abs(s.Recovery.Seconds-left) > 0.25*left {
				t.Errorf("recovery %+v, want ~%.0f s of debt alone", s.Recovery, left)
			}
		}},
		{"ok within 15 s of the debt paid", burstEnd + 15, func(t *testing.T, s Signals) {
			if s.Level != OK {
				t.Errorf("level %v %v after the debt was paid: %q", s.Level, 15*time.Second, s.Reasons)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(time.Duration(tc.at * float64(time.Second)))
			sh := stopped
			sh.Created, sh.Completed, sh.Queue = until(sh.Created, now), until(sh.Completed, now), until(sh.Queue, now)
			tc.check(t, Evaluate([]Shard{sh}, now, window, th).Shards[0])
		})
	}
}

// A burst from idle, shaped as the recorded runs of the capacity probe's
// three-task process are (testdata/burst.json): 110 instances a second
// for 30 s, nothing completed; the load stops; the queue falls from its
// peak at 85 records a second until only the work in flight is queued;
// then the debt is paid at 75 instances a second, where one step each
// (the 110 a second it took in) would say 110.
func TestAfterABurst(t *testing.T) {
	const (
		window     = 10 * time.Minute
		start, end = 5.0, 35.0 // the burst
		created    = 110.0
		fall, pace = 85.0, 75.0
		debt       = created * (end - start)
		inFlight   = 50.0 // records queued while the debt is paid
	)
	peak := created * (end - start) * 0.68 // records queued by the end of the burst
	emptied := end + (peak-inFlight)/fall
	paid := emptied + debt/pace
	sh := Shard{Name: "s",
		Created: at1s(window, func(x float64) float64 {
			if x >= start && x < end {
				return created
			}
			return 0
		}),
		Completed: at1s(window, func(x float64) float64 {
			if x >= emptied && x < paid {
				return pace
			}
			return 0
		}),
		Queue: at1s(window, func(x float64) float64 {
			switch {
			case x < start:
				return 0
			case x < end:
				return peak * (x - start) / (end - start)
			case x < emptied:
				return peak - fall*(x-end)
			case x < paid:
				return inFlight
			}
			return 0
		}),
	}
	th := DefaultThresholds()
	at := func(x float64) Signals {
		now := t0.Add(time.Duration(x * float64(time.Second)))
		s := sh
		s.Created, s.Completed, s.Queue = until(s.Created, now), until(s.Completed, now), until(s.Queue, now)
		return Evaluate([]Shard{s}, now, window, th).Shards[0]
	}

	t.Run("the turn shows at once: falling, not growing", func(t *testing.T) {
		s := at(end + 4)
		if s.QueueGrowing || hasReason(s.Reasons, "growing") || !s.QueueFalling {
			t.Errorf("growing %v, falling %v, 4 s after the peak: %q", s.QueueGrowing, s.QueueFalling, s.Reasons)
		}
		if s.Recovery == nil {
			t.Errorf("no ETA 4 s after the peak: %q", s.Reasons)
		}
	})
	t.Run("every 5 s from the peak: ETAs within 20% or 10 s", func(t *testing.T) {
		judged, within := 0, 0
		var lines []string
		for x := end + 4; x < paid; x += 5 {
			s := at(x)
			left := paid - x
			judged++
			line := fmt.Sprintf("+%.0fs: actual %.0fs, no ETA", x-end, left)
			if r := s.Recovery; r != nil {
				line = fmt.Sprintf("+%.0fs: actual %.0fs, ETA %.0fs (%s at %.0f/s)", x-end, left, r.Seconds, r.PaceFrom, r.PacePerSec)
				if math.Abs(r.Seconds-left) <= max(0.2*left, 10) {
					within++
					line += " within"
				}
			}
			lines = append(lines, line)
		}
		if float64(within) < 0.8*float64(judged) {
			t.Errorf("%d of %d ETAs within 20%% or 10 s:\n%s", within, judged, strings.Join(lines, "\n"))
		}
	})
	t.Run("while the debt is paid: the pace it pays at, and not ok", func(t *testing.T) {
		s := at(emptied + 15)
		if s.Level == OK || !hasReason(s.Reasons, "debt") {
			t.Errorf("level %v with %.0f instances owed: %q", s.Level, s.Debt, s.Reasons)
		}
		if r := s.Recovery; r == nil || r.PaceFrom != PaceNow || math.Abs(r.PacePerSec-pace) > 1 {
			t.Errorf("recovery %+v, want the %.0f a second it completes now", r, pace)
		}
	})
	t.Run("ok once paid", func(t *testing.T) {
		if s := at(paid + 15); s.Level != OK {
			t.Errorf("level %v 15 s after the debt was paid: %q", s.Level, s.Reasons)
		}
	})
}

// A queue that grew for minutes and has turned: the five-minute fit
// still rises with a good R², the last minute falls.
func TestTurnedQueueIsNotGrowing(t *testing.T) {
	const window = 10 * time.Minute
	q := at1s(window, func(x float64) float64 {
		if x < 500 {
			return 60 * x
		}
		return 30000 - 2*(x-500)
	})
	s := Shard{Name: "s", Created: at1s(window, func(float64) float64 { return 40 }), Completed: at1s(window, func(float64) float64 { return 1 }), Queue: q}
	sig := Evaluate([]Shard{s}, t0.Add(window), window, DefaultThresholds()).Shards[0]
	if sig.QueueGrowing || hasReason(sig.Reasons, "growing") || !sig.QueueFalling {
		t.Errorf("growing %v falling %v slope %.1f: %q", sig.QueueGrowing, sig.QueueFalling, sig.QueueSlope, sig.Reasons)
	}
	if math.Abs(sig.QueueSlope+2) > 0.5 {
		t.Errorf("slope %.1f, want the last minute's -2/s", sig.QueueSlope)
	}
}

// Levels step down on the last 15 s: p99 over the minute is still over a
// second, the last 15 s are fast; the scissors over the minute are open,
// the last 15 s complete what is created. Less than 15 s of it is not
// enough. What the shard owes from those minutes (40 a second) keeps it
// at warn until it is paid.
func TestStepDown(t *testing.T) {
	const window = 5 * time.Minute
	now := t0.Add(window)
	th := DefaultThresholds()
	for _, tc := range []struct {
		name      string
		recovered float64 // seconds before now the shard recovered
		level     Level
	}{
		{"recovered 20 s ago: warn while it pays its debt", 20, Warn},
		{"recovered 5 s ago: not yet 15 s of evidence", 5, Critical},
		{"still slow", 0, Critical},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cut := window.Seconds() - tc.recovered
			if tc.recovered == 0 {
				cut = math.Inf(1)
			}
			s := Shard{Name: "s",
				Created: at1s(window, func(float64) float64 { return 50 }),
				Completed: at1s(window, func(x float64) float64 {
					if x < cut {
						return 10
					}
					return 55
				}),
				Queue: at1s(window, func(float64) float64 { return 30 }),
			}
			s.Latency = heat(window, func(x float64) int {
				if x < cut {
					return 4
				}
				return 1
			})
			sig := Evaluate([]Shard{s}, now, window, th).Shards[0]
			if sig.Level != tc.level {
				t.Errorf("level %v, want %v: %q", sig.Level, tc.level, sig.Reasons)
			}
			if tc.level == Warn && (len(sig.Reasons) != 1 || !hasReason(sig.Reasons, "debt 11k instances, caught up in")) {
				t.Errorf("reasons %q, want the debt alone", sig.Reasons)
			}
		})
	}
}

func until(s Series, now time.Time) Series {
	for i, p := range s {
		if p.T.After(now) {
			return s[:i]
		}
	}
	return s
}

func hasReason(reasons []string, part string) bool {
	for _, r := range reasons {
		if strings.Contains(r, part) {
			return true
		}
	}
	return false
}

// A queue that turned and takes back a batch of job completions every
// few seconds on its way down falls off any line for a while: its turn
// is read from the samples that left the line it grew along (offLine),
// and a queue that grows through as much noise as it falls through is
// still read as growing.
func TestQueueOffItsLine(t *testing.T) {
	const (
		window     = 10 * time.Minute
		peakAt     = 300   // seconds
		rise       = 44.0  // records a second, up to the peak
		fall       = 100.0 // records a second, after it
		batch      = 250.0 // records taken back every batchEvery seconds: a net fall of 50/s
		batchEvery = 5.0
	)
	turned := func(x float64) float64 {
		if x <= peakAt {
			return rise * x
		}
		since := x - peakAt
		return rise*peakAt - fall*since + batch*math.Floor(since/batchEvery)
	}
	th := DefaultThresholds()
	// growing reads q as it stood at (seconds; at1s samples a second apart).
	growing := func(q Series, at int) bool {
		_, _, g := QueueTrend(q[:at+1], t0.Add(time.Duration(at)*time.Second), th)
		return g
	}
	for seed := uint64(1); seed <= 50; seed++ {
		q := at1s(window, noisy(seed, 60, turned))
		if !growing(q, peakAt) {
			t.Fatalf("seed %d: not growing at its peak", seed)
		}
		if at := peakAt + 7; growing(q, at) {
			t.Errorf("seed %d: still growing 7 s after its turn, at %.0f", seed, q[at].V)
		}
	}
	const seeds = 2000
	stopped := 0
	for seed := uint64(1); seed <= seeds; seed++ {
		q := at1s(window, noisy(seed, 400, func(x float64) float64 { return 3000 + 40*x }))
		if !growing(q, len(q)-1) {
			stopped++
		}
	}
	if stopped > seeds/100 {
		t.Errorf("%d of %d queues rising at 40/s through ±400 read as no longer growing", stopped, seeds)
	}
}
