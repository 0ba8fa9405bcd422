package signals

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// series builds a series at 5 s steps over d from f(seconds since start).
func series(d time.Duration, f func(s float64) float64) Series {
	var out Series
	for s := 0.0; s <= d.Seconds(); s += 5 {
		out = append(out, Point{t0.Add(time.Duration(s) * time.Second), f(s)})
	}
	return out
}

func noisy(seed uint64, amp float64, f func(float64) float64) func(float64) float64 {
	r := rand.New(rand.NewPCG(seed, seed))
	return func(s float64) float64 { return max(0, f(s)+amp*(r.Float64()*2-1)) }
}

// heat builds a heatmap whose mass sits in bucket at(s).
func heat(d time.Duration, at func(s float64) int) Heatmap {
	h := Heatmap{Bounds: []float64{0.001, 0.01, 0.1, 1, 5, math.Inf(1)}}
	for s := 0.0; s <= d.Seconds(); s += 5 {
		h.Times = append(h.Times, t0.Add(time.Duration(s)*time.Second))
		c := make([]float64, len(h.Bounds))
		c[at(s)] = 100
		h.Counts = append(h.Counts, c)
	}
	return h
}

func TestLinearFit(t *testing.T) {
	for _, tc := range []struct {
		name      string
		s         Series
		slope, r2 float64
	}{
		{"a line", series(10*time.Minute, func(s float64) float64 { return 100 + 3*s }), 3, 1},
		{"flat", series(10*time.Minute, func(float64) float64 { return 7 }), 0, 0},
		{"too short", Series{{t0, 1}, {t0.Add(time.Second), 5}}, 0, 0},
	} {
		f := LinearFit(tc.s)
		if math.Abs(f.Slope-tc.slope) > 1e-9 || math.Abs(f.R2-tc.r2) > 1e-9 {
			t.Errorf("%s: slope %v R² %v, want %v and %v", tc.name, f.Slope, f.R2, tc.slope, tc.r2)
		}
	}
}

func TestQuantile(t *testing.T) {
	bounds := []float64{0.1, 1, math.Inf(1)}
	for _, tc := range []struct {
		q      float64
		counts []float64
		want   float64
	}{
		{0.5, []float64{100, 0, 0}, 0.05},
		{0.99, []float64{50, 50, 0}, 0.1 + 0.9*0.98},
		{0.99, []float64{0, 0, 10}, 1}, // +Inf: the highest finite bound
		{0.5, []float64{0, 0, 0}, math.NaN()},
	} {
		got := Quantile(tc.q, bounds, tc.counts)
		if math.Abs(got-tc.want) > 1e-9 && !(math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("q%v of %v = %v, want %v", tc.q, tc.counts, got, tc.want)
		}
	}
}

func TestEvaluate(t *testing.T) {
	const window = 10 * time.Minute
	now := t0.Add(window)
	th := DefaultThresholds()
	steady := func(rate float64, seed uint64) Shard {
		return Shard{
			Created:   series(window, noisy(seed, rate*0.1, func(float64) float64 { return rate })),
			Completed: series(window, noisy(seed+1, rate*0.1, func(float64) float64 { return rate })),
			Queue:     series(window, noisy(seed+2, 20, func(float64) float64 { return 30 })),
			Latency:   heat(window, func(float64) int { return 1 }),
		}
	}
	for _, tc := range []struct {
		name    string
		shard   func() Shard
		level   Level
		reasons []string // each must appear in some reason
		check   func(t *testing.T, s Signals)
	}{
		{"steady at 70% load", func() Shard { return steady(100, 1) }, OK, nil, func(t *testing.T, s Signals) {
			if s.QueueGrowing || s.Ratio == nil || *s.Ratio < 0.9 {
				t.Errorf("steady: %+v", s)
			}
		}},
		{"idle", func() Shard {
			s := steady(0, 2)
			s.Completed = series(window, func(float64) float64 { return 0.1 })
			return s
		}, OK, nil, func(t *testing.T, s Signals) {
			if s.Ratio != nil {
				t.Errorf("an idle shard has a ratio: %v", *s.Ratio)
			}
		}},
		{"queue plateau after a burst", func() Shard {
			s := steady(100, 3)
			s.Queue = series(window, func(x float64) float64 { return 5000 * (1 - math.Exp(-x/20)) })
			return s
		}, OK, nil, func(t *testing.T, s Signals) {
			if s.QueueGrowing {
				t.Errorf("a plateau read as linear growth: slope %v R² %v", s.QueueSlope, s.QueueR2)
			}
		}},
		{"queue growing linearly", func() Shard {
			s := steady(100, 4)
			s.Queue = series(window, noisy(5, 200, func(x float64) float64 { return 40 * x }))
			return s
		}, Critical, []string{"queue growing linearly"}, func(t *testing.T, s Signals) {
			if math.Abs(s.QueueSlope-40) > 5 { // a one-minute fit through ±200 of noise
				t.Errorf("slope %v, want ~40/s", s.QueueSlope)
			}
		}},
		{"scissors opening past the knee", func() Shard {
			s := steady(120, 6)
			// Completion falls from 120/s to 5/s from minute 8 on.
			s.Completed = series(window, func(x float64) float64 {
				if x < 480 {
					return 120
				}
				return 5
			})
			return s
		}, Critical, []string{"scissors", "below 50%", "not recovering"}, func(t *testing.T, s Signals) {
			if s.BelowActSeconds < 100 || s.BelowActSeconds > 125 {
				t.Errorf("below 50%% for %vs, want ~120", s.BelowActSeconds)
			}
			// 120 s × 115/s; the noise on creation and the trapezoid at the
			// step move it by a few hundred.
			if s.Debt < 120*115-800 || s.Debt > 120*115+800 {
				t.Errorf("debt %v, want ~13,800 instances", s.Debt)
			}
		}},
		{"plan: completion at 70% for two minutes", func() Shard {
			s := steady(100, 7)
			s.Completed = series(window, func(x float64) float64 {
				if x < 480 {
					return 100
				}
				return 70
			})
			return s
		}, Warn, []string{"plan federation"}, nil},
		{"a short dip is not a trend", func() Shard {
			s := steady(100, 8)
			s.Completed = series(window, func(x float64) float64 {
				if x >= 580 {
					return 40
				}
				return 100
			})
			return s
		}, OK, nil, nil},
		{"heatmap mass moves to seconds", func() Shard {
			s := steady(100, 9)
			s.Latency = heat(window, func(x float64) int {
				if x < 300 {
					return 1
				}
				return 4 // 1-5 s
			})
			return s
		}, Critical, []string{"p99"}, func(t *testing.T, s Signals) {
			if s.P50 == nil || *s.P50 < 1 || s.SlowShare < 0.99 {
				t.Errorf("p50 %v, share at ≥1 s %v", s.P50, s.SlowShare)
			}
		}},
		{"recovering debt has an ETA", func() Shard {
			s := steady(100, 10)
			// Overloaded for five minutes, then draining at 150/s.
			s.Completed = series(window, func(x float64) float64 {
				if x < 300 {
					return 40
				}
				return 150
			})
			return s
		}, Warn, []string{"debt 2.5k instances, caught up in ~"}, func(t *testing.T, s Signals) {
			// Not ok while it owes 47 s of work. It pays 50/s net (150
			// completed, 100 created): it says so, paying now.
			if want := s.Debt / 50; !s.Recovering || s.RecoverySeconds == nil || math.Abs(*s.RecoverySeconds-want) > 0.2*want {
				t.Errorf("recovering %v in %+v (debt %v)", s.Recovering, s.Recovery, s.Debt)
			}
		}},
		{"work in flight is not a debt", func() Shard {
			s := steady(100, 12)
			// Each instance takes 8 s end to end: 800 in flight, and
			// completions a little ahead of creations at the end.
			s.Completed = series(window, func(x float64) float64 {
				switch {
				case x < 8:
					return 0
				case x >= 590:
					return 102
				}
				return 100
			})
			return s
		}, OK, nil, func(t *testing.T, s Signals) {
			if s.Debt < 600 {
				t.Errorf("debt %.0f, want the ~800 instances in flight", s.Debt)
			}
		}},
		{"no completions measured: no debt to warn about", func() Shard {
			s := steady(10, 13)
			s.Completed = nil // the proxy preset: what it placed, not what completed
			// Requests in flight piled up and drained at 30/s a minute ago.
			s.Queue = series(window, func(x float64) float64 {
				if x < 540 {
					return 30
				}
				return max(30, 1000-30*(x-540))
			})
			return s
		}, OK, nil, nil},
		{"backpressure drops", func() Shard {
			s := steady(100, 11)
			s.Received = series(window, func(float64) float64 { return 200 })
			s.Dropped = series(window, func(float64) float64 { return 40 })
			return s
		}, Warn, []string{"backpressure: 20%"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.shard()
			s.Name = "s1"
			r := Evaluate([]Shard{s}, now, window, th)
			got := r.Shards[0]
			if got.Level != tc.level || r.Level < tc.level {
				t.Errorf("level %v (report %v), want %v; reasons %q", got.Level, r.Level, tc.level, got.Reasons)
			}
			for _, want := range tc.reasons {
				found := false
				for _, reason := range got.Reasons {
					found = found || strings.Contains(reason, want)
				}
				if !found {
					t.Errorf("no reason says %q: %q", want, got.Reasons)
				}
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}

// The whole is the sum of its shards: one critical shard makes the
// report critical, and the overall rates add up.
func TestOverall(t *testing.T) {
	const window = 5 * time.Minute
	now := t0.Add(window)
	ok := Shard{Name: "a", Created: series(window, func(float64) float64 { return 50 }), Completed: series(window, func(float64) float64 { return 50 })}
	bad := Shard{Name: "b", Created: series(window, func(float64) float64 { return 50 }), Completed: series(window, func(float64) float64 { return 10 })}
	r := Evaluate([]Shard{bad, ok}, now, window, DefaultThresholds())
	if r.Level != Critical || r.Shards[0].Name != "a" || r.Shards[0].Level != OK || r.Shards[1].Level != Critical {
		t.Errorf("report %v, shards %v %v", r.Level, r.Shards[0].Level, r.Shards[1].Level)
	}
	if r.Overall.CreatedPerSec != 100 || r.Overall.CompletedPerSec != 60 {
		t.Errorf("overall %v created/s, %v completed/s; want 100 and 60", r.Overall.CreatedPerSec, r.Overall.CompletedPerSec)
	}
}

// A knee crossed mid-window: the queue is flat for six minutes, then
// grows as a line; the whole window's fit is poor, the recent one is not.
func TestQueueGrowthSinceTheKnee(t *testing.T) {
	const window = 10 * time.Minute
	s := Shard{
		Name:      "s",
		Created:   series(window, func(float64) float64 { return 100 }),
		Completed: series(window, func(float64) float64 { return 100 }),
		Queue: series(window, func(x float64) float64 {
			if x < 360 {
				return 20
			}
			return 20 + (x-360)*30
		}),
	}
	sig := Evaluate([]Shard{s}, t0.Add(window), window, DefaultThresholds()).Shards[0]
	if !sig.QueueGrowing || math.Abs(sig.QueueSlope-30) > 1 {
		t.Errorf("growing %v at %v/s (R² %v), want growing at 30/s", sig.QueueGrowing, sig.QueueSlope, sig.QueueR2)
	}
}
