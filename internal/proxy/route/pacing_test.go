package route

import (
	"math"
	"testing"
	"time"
)

// modelShard is a shard as a fluid: it processes capacity records a
// second, each new instance writes perInstance records, and past
// degradeAt queued records every record costs more, up to three times,
// as the simulator's --degrade plays an overloaded Zeebe.
type modelShard struct {
	capacity, perInstance, degradeAt float64
	// workers complete at most this many jobs a second (0: the shard's
	// one job per instance is done as soon as it is created); an
	// instance ends with its job.
	workers float64
	// batching: a job takes its workers longer the busier they are
	// (fetched and completed in ever larger batches), 1.3 s at their
	// rate, as a real fleet's jobs do: their wait rises long before the
	// workers are full.
	batching bool
	placing  float64 // placements a second, on average (batching)

	queue, committed, processed, created float64
	latencySum, latencyCount             float64
	jobsOpen, jobsEnded                  float64
	placed                               float64 // since the last reading (batching)
}

func (m *modelShard) rate() float64 {
	cost := 1.0
	if m.degradeAt > 0 && m.queue > m.degradeAt {
		cost = min(3, 1+(m.queue-m.degradeAt)/m.degradeAt)
	}
	return m.capacity / cost
}

func (m *modelShard) step(dt float64) {
	r := m.rate()
	n := min(m.queue, r*dt)
	// The records processed waited behind the queue ahead of them.
	m.latencySum += n * m.queue / r
	m.latencyCount += n
	m.queue -= n
	m.processed += n
	if m.workers > 0 {
		most := m.workers * dt
		if m.batching {
			latency := 0.1 + 1.2*min(1, m.placing/m.workers)
			most = min(most, m.jobsOpen*dt/latency)
		}
		done := min(m.jobsOpen, most)
		m.jobsOpen -= done
		m.jobsEnded += done
	}
}

func (m *modelShard) place() {
	m.placed++
	m.queue += m.perInstance
	m.committed += m.perInstance
	m.created++
	if m.workers > 0 {
		m.jobsOpen++
	}
}

func (m *modelShard) reading(at time.Time) pacingReading {
	m.placing += 0.5 * (m.placed - m.placing) // read every second
	m.placed = 0
	return pacingReading{at: at, lag: math.Round(m.queue), committed: m.committed, processed: m.processed,
		created: m.created, latencySum: m.latencySum, latCount: m.latencyCount,
		ended: m.jobsEnded, jobsOpen: m.jobsOpen, jobsEnded: m.jobsEnded}
}

// stretch is a load held for secs: offered instances a second, and
// whether the proxy placing them has the whole shard to itself (share 1)
// or half of it (another proxy places as much).
type stretch struct {
	secs    int
	offered float64
}

// outcome is what a stretch came to, in its last half (after the
// pacing settled), and when it was first refused.
type outcome struct {
	admitted, refused float64 // a second
	maxQueue          float64 // records
	firstRefusal      float64 // seconds into the stretch (-1: none)
	paced             bool    // at the stretch's end
}

// drive offers the stretches to a model shard through a pacer, reading
// the shard every second, and says what each came to.
func drive(t *testing.T, m *modelShard, stretches []stretch, target time.Duration) []outcome {
	t.Helper()
	var pc pacer
	const tick = 10 * time.Millisecond
	at := time.Unix(1_000_000, 0)
	pc.observe(m.reading(at), target, 1, false)
	var out []outcome
	var owed float64
	for _, s := range stretches {
		o := outcome{firstRefusal: -1}
		var admitted, refused float64
		ticks := s.secs * int(time.Second/tick)
		for i := range ticks {
			at = at.Add(tick)
			for owed += s.offered * tick.Seconds(); owed >= 1; owed-- {
				switch {
				case !pc.admits(at):
					if o.firstRefusal < 0 {
						o.firstRefusal = float64(i) * tick.Seconds()
					}
					if i >= ticks/2 {
						refused++
					}
				default:
					pc.note(at, 1)
					m.place()
					if i >= ticks/2 {
						admitted++
					}
				}
			}
			m.step(tick.Seconds())
			if i >= ticks/2 {
				o.maxQueue = max(o.maxQueue, m.queue)
			}
			if (i+1)%int(time.Second/tick) == 0 {
				pc.observe(m.reading(at), target, 1, false)
			}
		}
		half := float64(s.secs) / 2
		o.admitted, o.refused, o.paced = admitted/half, refused/half, pc.paced
		out = append(out, o)
	}
	return out
}

func TestPacing(t *testing.T) {
	const knee = 40.0 // 200 records a second, 5 an instance
	newShard := func() *modelShard { return &modelShard{capacity: 200, perInstance: 5, degradeAt: 100} }
	t.Run("a step within the knee is taken whole", func(t *testing.T) {
		// Instances that wait write nothing: only the records count.
		out := drive(t, newShard(), []stretch{{30, 0.1 * knee}, {30, 0.6 * knee}, {30, 0.9 * knee}}, DefaultQueueTarget)
		for i, o := range out {
			if o.firstRefusal >= 0 || o.paced {
				t.Errorf("stretch %d: refused from %.1f s, paced %v: want nothing refused", i+1, o.firstRefusal, o.paced)
			}
		}
	})
	for _, times := range []float64{1.5, 2, 3} {
		t.Run("past the knee", func(t *testing.T) {
			out := drive(t, newShard(), []stretch{{20, 0.5 * knee}, {60, times * knee}}, DefaultQueueTarget)
			o := out[1]
			t.Logf("%.1fx the knee: admitted %.1f/s, refused %.1f/s, first refusal after %.2f s, longest queue %.0f records", times, o.admitted, o.refused, o.firstRefusal, o.maxQueue)
			if o.firstRefusal < 0 || o.firstRefusal > 2.5 {
				t.Errorf("%.1fx: first refusal after %.2f s: want within two readings", times, o.firstRefusal)
			}
			if o.admitted < 0.9*knee || o.admitted > 1.05*knee {
				t.Errorf("%.1fx: admitted %.1f/s: want the knee's %.0f/s within -10%%/+5%%", times, o.admitted, knee)
			}
			// The first reading finds what a second at times the knee
			// built (the capacity is not known yet); then the queue is
			// held near the target's 50 records.
			if o.maxQueue > 100 {
				t.Errorf("%.1fx: the queue reached %.0f records: want it held near the target, not a collapse", times, o.maxQueue)
			}
		})
	}
	t.Run("a known capacity is a ceiling before any queue", func(t *testing.T) {
		// Saturated once, the shard is never offered three times its
		// knee at once: the first reading finds a short queue.
		out := drive(t, newShard(), []stretch{{30, 2 * knee}, {30, 0.5 * knee}, {30, 3 * knee}}, DefaultQueueTarget)
		if out[1].paced || out[1].refused > 0 {
			t.Errorf("half the knee after the overload: paced %v, refused %.1f/s: want pacing ended, nothing refused", out[1].paced, out[1].refused)
		}
		if o := out[2]; o.maxQueue > 100 || o.firstRefusal > 0.2 {
			t.Errorf("3x after a known capacity: queue %.0f, first refusal after %.2f s: want refused at once, the queue under 100", o.maxQueue, o.firstRefusal)
		}
	})
	t.Run("held by its job workers", func(t *testing.T) {
		// The log is far from its knee (1000 records/s, 5 an instance:
		// 200 instances/s); the workers complete 50 jobs a second. Past
		// that, jobs wait, and the shard is paced at what completes.
		shard := &modelShard{capacity: 1000, perInstance: 5, workers: 50}
		out := drive(t, shard, []stretch{{60, 30}, {60, 100}}, DefaultQueueTarget)
		if o := out[0]; o.firstRefusal >= 0 {
			t.Errorf("30/s under the workers' 50: refused from %.1f s", o.firstRefusal)
		}
		o := out[1]
		t.Logf("twice the workers' rate: admitted %.1f/s, refused %.1f/s, first refusal after %.1f s, %.0f jobs open at the end", o.admitted, o.refused, o.firstRefusal, shard.jobsOpen)
		if o.admitted < 0.9*50 || o.admitted > 1.1*50 {
			t.Errorf("admitted %.1f/s: want the workers' 50/s within 10%%", o.admitted)
		}
		if shard.jobsOpen > 100 {
			t.Errorf("%.0f jobs open: want the wait held near its target, not growing", shard.jobsOpen)
		}
	})
	t.Run("a pace an overload left low rises to what the workers do", func(t *testing.T) {
		// The workers' wait rises with their load well before they are
		// full: it sits between half the target and the target at
		// paces well under their 60 a second, and the pace must not
		// stay wherever the overload left it.
		shard := &modelShard{capacity: 1000, perInstance: 5, workers: 60, batching: true}
		out := drive(t, shard, []stretch{{60, 5}, {30, 200}, {120, 100}}, DefaultQueueTarget)
		o := out[2]
		t.Logf("past the workers' rate after an overload: admitted %.1f/s, refused %.1f/s, %.0f jobs open at the end", o.admitted, o.refused, shard.jobsOpen)
		if o.admitted < 0.85*60 {
			t.Errorf("admitted %.1f/s after the overload: want at least 85%% of the workers' 60/s", o.admitted)
		}
	})
	t.Run("a lull does not lower the pace", func(t *testing.T) {
		// What completes in a lull is what was offered: the knee
		// offered again after one is taken within seconds, not probed
		// back up from the floor.
		for name, shard := range map[string]*modelShard{
			"held by its log":         newShard(),
			"held by its job workers": {capacity: 1000, perInstance: 5, workers: knee},
		} {
			out := drive(t, shard, []stretch{{30, 2 * knee}, {2, 0}, {6, knee}}, DefaultQueueTarget)
			if o := out[2]; o.admitted < 0.9*knee {
				t.Errorf("%s, the knee offered after a lull: admitted %.1f/s, refused %.1f/s in its last 3 s: want at least 90%% of it", name, o.admitted, o.refused)
			}
		}
	})
	t.Run("pacing ends once the load fits", func(t *testing.T) {
		out := drive(t, newShard(), []stretch{{30, 2 * knee}, {10, 0.7 * knee}}, DefaultQueueTarget)
		if o := out[1]; o.paced || o.refused > 0 {
			t.Errorf("0.7x after 2x: paced %v, refused %.1f/s in the last 5 s: want neither", o.paced, o.refused)
		}
	})
}

// Readings that carry no rate keep the last decision; a queue that is
// not processed at all paces to the floor; a proxy with half the
// shard's placements paces half the rate; pacing off paces nothing.
func TestPacingReadings(t *testing.T) {
	at := time.Unix(1_000_000, 0)
	r := func(s int, lag, committed, processed, created float64) pacingReading {
		return pacingReading{at: at.Add(time.Duration(s) * time.Second), lag: lag, committed: committed, processed: processed, created: created}
	}
	var pc pacer
	pc.observe(r(0, 0, 0, 0, 0), time.Second, 1, false)
	// 1000 records processed under a queue: capacity 1000/s, 10 an
	// instance; the standing 2000 records are 2 s of queue.
	pc.observe(r(1, 2000, 2000, 0, 0), time.Second, 1, false)
	pc.placed.Store(100)
	st := pc.observe(r(2, 2000, 5000, 1000, 100), time.Second, 1, false)
	if st.state != "pacing" || st.capacity != 1000 || st.perInstance != 30 {
		t.Fatalf("2 s of queue over a 1 s target: %+v: want paced at capacity 1000 records/s, 30 records an instance", st)
	}
	if st.rate <= 0 || st.rate >= 1000.0/30 {
		t.Errorf("a queue over its target: %.1f instances/s: want under what the shard processes (%.1f/s), to work it off", st.rate, 1000.0/30)
	}
	// A leader change restarts the counters: the decision holds.
	if st := pc.observe(r(3, 2000, 10, 5, 1), time.Second, 1, false); st.state != "pacing" || !pc.capped.Load() {
		t.Errorf("counters restarted: %+v: want the last decision", st)
	}
	// Nothing processed under a standing queue: the floor.
	pc.observe(r(4, 2000, 20, 5, 1), time.Second, 1, false)
	if st := pc.observe(r(5, 2000, 20, 5, 1), time.Second, 3, false); st.state != "pacing" || st.rate != 3*minPacedRate*pc.share {
		t.Errorf("a stalled queue: %+v: want paced at the floor of 3 partitions", st)
	}
	if st := pc.observe(r(6, 2000, 20, 5, 1), time.Second, 3, true); st.state != "admitting" || pc.capped.Load() || !pc.admits(at.Add(7*time.Second)) {
		t.Errorf("pacing off: %+v: want nothing paced", st)
	}

	// Two proxies: this one placed half of what the shard created.
	var a, b pacer
	for s := range 30 {
		lag := 500.0
		a.placed.Store(50)
		b.placed.Store(100)
		a.observe(r(s, lag, float64(s)*1000, float64(s)*1000, float64(s)*100), 250*time.Millisecond, 1, false)
		b.observe(r(s, lag, float64(s)*1000, float64(s)*1000, float64(s)*100), 250*time.Millisecond, 1, false)
	}
	if b.share < 0.95 || a.share > 0.55 || a.share < 0.45 {
		t.Errorf("shares %.2f and %.2f: want half and all", a.share, b.share)
	}
}
