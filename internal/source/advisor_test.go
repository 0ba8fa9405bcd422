package source_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/signals/signalstest"
	"github.com/shardctl/shardctl/internal/source"
)

// watchSignals runs `shardctl signals --watch -o json ARGS` until ctx
// ends and hands each report it prints to each; wg waits for it.
func watchSignals(ctx context.Context, t *testing.T, wg *sync.WaitGroup, stderr io.Writer, bin string, each func(signals.Report), args ...string) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"signals", "--watch", "-o", "json"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var rep signals.Report
			if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
				t.Errorf("signals printed %q: %v", sc.Text(), err)
				continue
			}
			each(rep)
		}
		_ = cmd.Wait()
	})
}

// advisorRun is one shard read by `shardctl signals --watch --every
// EVERY -o json` as an operator runs it, and by a second scrape that
// records the series the advisor read: what the advisor said of the
// shard, for the judges in signalstest, against the moments of the run
// the test marks.
type advisorRun struct {
	t    *testing.T
	ctx  context.Context // the test's time limit
	stop context.CancelFunc
	wg   sync.WaitGroup
	// run ends with finish or the test: what runs beside the shard (the
	// readers, the advisor, a load) runs under it.
	run context.Context
	rec *source.Scrape
	// state, when set, says what the test reads of the shard itself, for
	// the marks' log lines.
	state func() string

	stderr proctest.LockedBuffer // the advisor's

	mu     sync.Mutex
	evals  []signalstest.Eval
	events []signalstest.Event
}

// startAdvisor starts the advisor on the shard whose /metrics is at
// metrics, evaluating every every (after a sample as long, 2 s at least)
// over a 10-minute window, and the recording scrape. limit bounds the whole run on a quiet
// core. Cleanup stops both.
func startAdvisor(t *testing.T, limit time.Duration, metrics string, every time.Duration) *advisorRun {
	bin := proctest.Build(t)
	r := &advisorRun{t: t, ctx: budget.Context(t, limit)}
	r.run, r.stop = context.WithCancel(r.ctx)
	t.Cleanup(func() { r.stop(); r.wg.Wait() })
	watchSignals(r.run, t, &r.wg, &r.stderr, bin, func(rep signals.Report) {
		if len(rep.Shards) != 1 {
			t.Errorf("signals reported %d shards, want the one it reads", len(rep.Shards))
			return
		}
		r.mu.Lock()
		r.evals = append(r.evals, signalstest.Eval{At: rep.At, Sig: rep.Shards[0]})
		r.mu.Unlock()
	}, "--scrape", "recorded="+metrics, "--every", every.String(), "--sample", max(every, 2*time.Second).String(), "--window", "10m")
	var err error
	r.rec, err = source.NewScrape([]source.Target{{Name: "recorded", URL: metrics}}, "zeebe", time.Second, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	runCtx := r.run
	r.wg.Go(func() { r.rec.Run(runCtx) })
	return r
}

// mark names this moment of the run, for the judges.
func (r *advisorRun) mark(what string) {
	now := time.Now()
	r.mu.Lock()
	r.events = append(r.events, signalstest.Event{At: now, What: what})
	r.mu.Unlock()
	line := now.Format(time.TimeOnly) + ": " + what
	if r.state != nil {
		line += " (" + r.state() + ")"
	}
	r.t.Log(line)
}

// hold lets the run go on for d.
func (r *advisorRun) hold(d time.Duration) {
	select {
	case <-r.ctx.Done():
		r.t.Fatalf("the test ran out of time: %v", r.ctx.Err())
	case <-time.After(d):
	}
}

// finish marks the end, stops the run and returns the recording of the
// series the advisor read and what the advisor said.
func (r *advisorRun) finish() (signalstest.Recording, []signalstest.Eval) {
	t := r.t
	r.mark("end")
	shards, err := r.rec.Fetch(r.ctx, time.Now(), 15*time.Minute, time.Second)
	r.stop()
	r.wg.Wait()
	if err != nil || len(shards) != 1 {
		t.Fatalf("the recording scrape: %v, %d shards", err, len(shards))
	}
	recording, err := signalstest.Record(shards[0], r.events)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.evals) < 20 {
		t.Fatalf("%d evaluations; signals said: %s", len(r.evals), r.stderr.String())
	}
	return recording, r.evals
}

// judge logs what the advisor said against the recovery measured and
// fails the test with the verdict's failures.
func (r *advisorRun) judge(v signalstest.Verdict, every time.Duration) {
	r.t.Logf("the advisor every %v, against the recovery measured:\n%s", every, strings.Join(v.Lines, "\n"))
	for _, f := range v.Failures {
		r.t.Error(f)
	}
}

// TestAdvisorOnAScriptedRecovery drives `shardctl signals --watch` through
// a burst and its recovery in seconds: a shard whose metrics follow a
// script takes 100 instances a second for 5 s and completes none, its
// queue falls from its peak at 100 records a second until only the work
// in flight is queued, then it pays its debt at 100 instances a second.
// The advisor, every second, is judged as the live run of the long tier
// is (TestAdvisorOnTheWayDown, signalstest.Judge): from its first ETA to
// the debt paid, each within 20% of the recovery's length (or 10 s) of
// the end; no "growing" while the queue's last minute falls; ok from 15 s
// after the debt was paid.
//
// Not JudgeFromPeak's "not ok until the debt is paid": a burst this
// short (under the scissors' 30 s) leaves the shard ok for the seconds
// between its queue no longer growing and its fall showing, debt and
// queue notwithstanding; the long tier's bursts keep the scissors open.
func TestAdvisorOnAScriptedRecovery(t *testing.T) {
	t.Parallel()
	const (
		idle, burst, rate = 2.0, 5.0, 100.0 // seconds, seconds, instances a second
		perInstance       = 2.0             // records queued per instance created
		fall              = 100.0           // records a second the queue falls from its peak
		inFlight          = 50.0            // records queued while the debt is paid
	)
	peakAt, top := idle+burst, perInstance*rate*burst
	emptied := peakAt + (top-inFlight)/fall
	paid := emptied + burst // completions at the rate it took instances in
	between := func(x, from, to float64) float64 { return min(max(x, from), to) - from }
	script := func(since time.Duration) (created, completed, queue float64) {
		x := since.Seconds()
		switch {
		case x < idle:
		case x < peakAt:
			queue = perInstance * rate * (x - idle)
		case x < emptied:
			queue = top - fall*(x-peakAt)
		case x < paid:
			queue = inFlight
		}
		return rate * between(x, idle, peakAt), rate * between(x, emptied, paid), queue
	}
	proctest.Build(t) // before the script's clock starts
	start := time.Now()
	srv := httptest.NewServer(source.ScriptedShard(start, script))
	t.Cleanup(srv.Close)
	const every = time.Second
	r := startAdvisor(t, 2*time.Minute, srv.URL, every)
	at := func(x float64) { r.hold(time.Until(start.Add(time.Duration(x * float64(time.Second))))) }
	at(idle)
	r.mark(signalstest.EventOverload)
	at(peakAt)
	r.mark(signalstest.EventRecover)
	at(paid)
	r.mark(signalstest.EventPaid)
	at(paid + signalstest.OKAfter.Seconds() + 3)
	recording, evals := r.finish()

	r.judge(signalstest.Judge(recording, evals, signals.DefaultThresholds(), signalstest.ETAError), every)
}
