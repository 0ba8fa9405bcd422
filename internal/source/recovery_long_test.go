//go:build long

package source_test

// The advisor through two recoveries of a simulator, and through a burst
// and its recovery, takes minutes each: `go test -tags long -run
// 'TestAdvisorOnTheWayDown|TestAdvisorAfterABurst' ./internal/source/`
// (make test-long). In the default suite, the same judges read these
// runs' recordings (internal/signals TestRecordedWayDown and
// TestRecordedFromThePeak) and shapes like theirs (TestOnTheWayDown,
// TestAfterABurst there), and TestAdvisorOnAScriptedRecovery here drives
// `shardctl signals --watch` through a recovery in seconds.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/signals/signalstest"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/probes/capacity"
)

// recordEnv names a file to write a run's series to, for the replays in
// internal/signals (its testdata/recovery.json is one such run); when it
// names a directory, each test writes its own file there, named after it.
const recordEnv = "SHARDCTL_RECORD_RECOVERY"

// everyEval is how often the advisor evaluates, as `signals --watch
// --every` is set in a runbook.
const everyEval = 5 * time.Second

// TestAdvisorOnTheWayDown drives a degraded simulator past its knee,
// stops the load, overloads it again and lowers the load below the knee,
// while `shardctl signals --watch --every 5s -o json` reads it as an
// operator would. Beside it the test reads the simulator's instances in
// flight and its queue four times a second: the debt is paid when both
// are back where the load leaves them. Every ETA the advisor printed from
// the first of a recovery to the debt paid must put its end within 30% of
// the recovery's length (or 10 s) of the end measured (signalstest.Judge);
// no reason may say the queue grows while its last minute falls; and the
// level must be ok from 15 s after the debt was paid.
func TestAdvisorOnTheWayDown(t *testing.T) {
	// The knee of this process at 300 records/s is near 80 instances/s.
	const (
		warmRate = 70.0
		overRate = 150.0
		lowRate  = 25.0 // a third of the knee: a degraded shard recovers, slowly
	)
	r := startSimRun(t, 10*time.Minute)
	r.offer(load.Config{ProcessID: "order", JobType: "work", Rate: warmRate})
	r.mark(fmt.Sprintf("warm at %.0f/s", warmRate))
	r.hold(70 * time.Second) // under the knee: a minute of the pace it can show
	r.setRate(overRate, signalstest.EventOverload)
	r.hold(20 * time.Second)
	r.setRate(0, signalstest.EventRecover)
	r.paid(0)
	r.hold(25 * time.Second)
	r.setRate(overRate, signalstest.EventOverload)
	r.hold(10 * time.Second)
	r.setRate(lowRate, signalstest.EventRecover)
	r.paid(lowRate)
	r.hold(25 * time.Second)
	recording, evals := r.finish()

	// The bar is 20% of the recovery's length (signalstest.ETAError, met
	// by the recorded runs before the shard's first burst of completions
	// outruns the pace it has shown); a live run on a busy machine is
	// failed only past 30%, and its lines mark each ETA over the bar.
	r.judge(signalstest.Judge(recording, evals, signals.DefaultThresholds(), 0.3), everyEval)
}

// TestAdvisorAfterABurst offers a degraded simulator the load `probe
// capacity` offers by default (its built-in process of three service
// tasks in a line, jobs polled) at 110 instances a second, well past its
// knee, for 30 s, then nothing, while the advisor reads it as in
// TestAdvisorOnTheWayDown. Its queue peaks and falls; from the first
// evaluation after the peak to the burst worked off (nothing in flight,
// nothing queued), at least 80% of the evaluations must give an ETA
// within 30% (or 10 s) of the time actually left (20% for the recorded
// runs replayed in the default suite); no reason may say the
// queue grows once it has turned; and the level must not be ok while the
// debt is still being paid (signalstest.JudgeFromPeak).
//
// The jobs are polled, not streamed: with --stream the Go client's
// worker stops polling once its streamer has swallowed the completions it
// counts by (zeebe-client-go issue 41), and the jobs the stream could not
// take are never worked: the burst is never worked off.
func TestAdvisorAfterABurst(t *testing.T) {
	const (
		burstRate = 110.0
		burstFor  = 30 * time.Second
	)
	r := startSimRun(t, 5*time.Minute)
	probe := capacity.Config{Client: load.GRPC(r.client)}
	if err := probe.Check(); err != nil {
		t.Fatal(err)
	}
	lc, err := probe.Load()
	if err != nil {
		t.Fatal(err)
	}
	r.offer(lc)
	r.hold(5 * time.Second) // the advisor's first sample
	r.setRate(burstRate, signalstest.EventOverload)
	r.hold(burstFor)
	r.setRate(0, signalstest.EventRecover)
	r.paid(0)
	r.hold(25 * time.Second)
	recording, evals := r.finish()

	// As TestAdvisorOnTheWayDown: the recordings are held to 20%
	// (TestRecordedFromThePeak); a live run, whose workers pay the debt
	// at a pace that moves with what else the machine runs, is counted
	// within up to 30%, and its lines mark each ETA over 20%.
	r.judge(signalstest.JudgeFromPeak(recording, evals, signals.DefaultThresholds(), 0.3), everyEval)
}

// simRun is a degraded simulator under a load, read by the advisor (an
// advisorRun) and by the test from the simulator's own counters: the
// truth the advisor's ETAs are judged against.
type simRun struct {
	*advisorRun
	client zbc.Client // the simulator's
	load   *load.Generator

	truthMu sync.Mutex
	truth   []reading
}

// reading is the simulator's own count of what it holds.
type reading struct {
	at              time.Time
	inFlight, queue float64
}

// startSimRun starts a simulator of one partition of 300 records a
// second that degrades past its knee, the advisor and the readers; offer
// starts the load. limit bounds the whole run on a quiet core. Cleanup
// stops everything.
func startSimRun(t *testing.T, limit time.Duration) *simRun {
	s := simtest.Start(t, sim.Config{Partitions: 1, Capacity: 300, Degrade: true, BacklogLimit: -1})
	metrics := "http://" + s.MetricsAddr().String() + "/metrics"
	r := &simRun{advisorRun: startAdvisor(t, limit, metrics, everyEval), client: simtest.Client(t, s.Addr().String())}
	r.state = func() string {
		l := r.latest()
		return fmt.Sprintf("in flight %.0f, queue %.0f", l.inFlight, l.queue)
	}
	// The truth: instances in flight and records queued, from the
	// simulator's own counters.
	runCtx := r.run
	r.wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			b := backlog.Scrape{}.Read(runCtx, backlog.Target{Shard: "s", MetricsURL: metrics})
			if b.Known() {
				r.truthMu.Lock()
				r.truth = append(r.truth, reading{b.At, b.InFlight, b.Lag})
				r.truthMu.Unlock()
			}
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return r
}

// offer deploys lc's process and runs its load, at its rate, until the
// run ends.
func (r *simRun) offer(lc load.Config) {
	r.load = load.New(load.GRPC(r.client), lc)
	if err := r.load.Deploy(r.ctx); err != nil {
		r.t.Fatal(err)
	}
	r.wg.Go(func() { r.load.Run(r.run) })
}

// latest is the last reading of the truth; NaN before the first.
func (r *simRun) latest() reading {
	r.truthMu.Lock()
	defer r.truthMu.Unlock()
	if len(r.truth) == 0 {
		return reading{inFlight: math.NaN(), queue: math.NaN()} // not read yet: never paid
	}
	return r.truth[len(r.truth)-1]
}

// setRate changes the load's rate and marks the moment as what.
func (r *simRun) setRate(perSec float64, what string) {
	r.load.SetRate(perSec)
	r.mark(what)
}

// paid waits until the debt is paid: nothing queued ahead of the work,
// and no more instances in flight than the rate keeps there.
func (r *simRun) paid(rate float64) {
	limit := max(10, 2*rate)
	deadline := time.Now().Add(budget.Of(4 * time.Minute))
	for {
		if l := r.latest(); l.queue <= signals.DefaultThresholds().QueueEmpty && l.inFlight <= limit {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the debt was not paid within 4m at %v/s: %+v", rate, r.latest())
		}
		r.hold(250 * time.Millisecond)
	}
	r.mark(signalstest.EventPaid)
}

// finish ends the run as advisorRun.finish does, and saves the recording
// where recordEnv says, for the replays.
func (r *simRun) finish() (signalstest.Recording, []signalstest.Eval) {
	recording, evals := r.advisorRun.finish()
	if path := os.Getenv(recordEnv); path != "" {
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			path = filepath.Join(path, r.t.Name()+".json")
		}
		if err := recording.Save(path); err != nil {
			r.t.Fatal(err)
		}
		r.t.Logf("recorded the run in %s", path)
	}
	return recording, evals
}
