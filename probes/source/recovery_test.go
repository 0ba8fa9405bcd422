package source_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/probes/backlog"
	"github.com/shardctl/shardctl/probes/load"
	"github.com/shardctl/shardctl/probes/signals"
	"github.com/shardctl/shardctl/probes/signals/signalstest"
	"github.com/shardctl/shardctl/probes/source"
)

// recordEnv names a file to write the run's series to, for the replay in
// probes/signals (its testdata/recovery.json is one such run).
const recordEnv = "SHARDCTL_RECORD_RECOVERY"

// TestAdvisorOnTheWayDown drives a degraded simulator past its knee,
// stops the load, overloads it again and lowers the load below the knee,
// while `shardctl signals --watch --every 5s -o json` reads it as an
// operator would. Beside it the test reads the simulator's instances in
// flight and its queue four times a second: the debt is paid when both
// are back where the load leaves them. Every ETA the advisor printed from
// the first of a recovery to the debt paid must be within 20% of the time
// actually left; no reason may say the queue grows while its last minute
// falls; and the level must be ok from 15 s after the debt was paid.
func TestAdvisorOnTheWayDown(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a simulator through two recoveries, some four minutes")
	}
	// The knee of this process at 300 records/s is near 80 instances/s.
	const (
		warmRate = 70.0
		overRate = 150.0
		lowRate  = 25.0 // a third of the knee: a degraded shard recovers, slowly
		evalUs   = 5 * time.Second
	)
	s := simtest.Start(t, sim.Config{Partitions: 1, Capacity: 300, Degrade: true, BacklogLimit: -1})
	metrics := "http://" + s.MetricsAddr().String() + "/metrics"
	bin := proctest.Build(t)
	ctx := budget.Context(t, 10*time.Minute)
	g := load.New(simtest.Client(t, s.Addr().String()), load.Config{ProcessID: "order", JobType: "work", Rate: warmRate})
	if err := g.Deploy(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	wg.Go(func() { g.Run(runCtx) })

	// The truth: instances in flight and records queued, from the
	// simulator's own counters.
	type reading struct {
		at              time.Time
		inFlight, queue float64
	}
	var mu sync.Mutex
	var truth []reading
	wg.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			b := backlog.Scrape{}.Read(runCtx, backlog.Target{Shard: "s", MetricsURL: metrics})
			if b.Known() {
				mu.Lock()
				truth = append(truth, reading{b.At, b.InFlight, b.Lag})
				mu.Unlock()
			}
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	latest := func() reading {
		mu.Lock()
		defer mu.Unlock()
		if len(truth) == 0 {
			return reading{inFlight: math.NaN(), queue: math.NaN()} // not read yet: never paid
		}
		return truth[len(truth)-1]
	}

	// The advisor, as an operator runs it.
	cmd := exec.CommandContext(runCtx, bin, "signals", "--scrape", "recorded="+metrics, "--watch", "--every", evalUs.String(),
		"--sample", "5s", "--window", "10m", "-o", "json")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var evals []signalstest.Eval
	wg.Go(func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r signals.Report
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil || len(r.Shards) != 1 {
				t.Errorf("signals printed %q: %v", sc.Text(), err)
				continue
			}
			mu.Lock()
			evals = append(evals, signalstest.Eval{At: r.At, Sig: r.Shards[0]})
			mu.Unlock()
		}
		_ = cmd.Wait()
	})
	// A second scrape records the series the advisor read, for the replay.
	rec, err := source.NewScrape([]source.Target{{Name: "recorded", URL: metrics}}, "zeebe", time.Second, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { rec.Run(runCtx) })

	var events []signalstest.Event
	mark := func(what string) {
		events = append(events, signalstest.Event{At: time.Now(), What: what})
		t.Logf("%s: %s (in flight %.0f, queue %.0f)", time.Now().Format(time.TimeOnly), what, latest().inFlight, latest().queue)
	}
	hold := func(d time.Duration) {
		select {
		case <-ctx.Done():
			t.Fatalf("the test ran out of time: %v", ctx.Err())
		case <-time.After(d):
		}
	}
	// paid waits until the debt is paid: nothing queued ahead of the
	// work, and no more instances in flight than the rate keeps there.
	paid := func(rate float64) {
		limit := max(10, 2*rate)
		deadline := time.Now().Add(budget.Of(4 * time.Minute))
		for {
			if r := latest(); r.queue <= signals.DefaultThresholds().QueueEmpty && r.inFlight <= limit {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the debt was not paid within 4m at %v/s: %+v", rate, latest())
			}
			hold(250 * time.Millisecond)
		}
		mark(signalstest.EventPaid)
	}

	mark(fmt.Sprintf("warm at %.0f/s", warmRate))
	hold(70 * time.Second) // under the knee: a minute of the pace it can show
	g.SetRate(overRate)
	mark(signalstest.EventOverload)
	hold(20 * time.Second)
	g.SetRate(0)
	mark(signalstest.EventRecover)
	paid(0)
	hold(25 * time.Second)
	g.SetRate(overRate)
	mark(signalstest.EventOverload)
	hold(10 * time.Second)
	g.SetRate(lowRate)
	mark(signalstest.EventRecover)
	paid(lowRate)
	hold(25 * time.Second)
	mark("end")

	shards, err := rec.Fetch(ctx, time.Now(), 15*time.Minute, time.Second)
	stop()
	wg.Wait()
	if err != nil || len(shards) != 1 {
		t.Fatalf("the recording scrape: %v, %d shards", err, len(shards))
	}
	recording, err := signalstest.Record(shards[0], events)
	if err != nil {
		t.Fatal(err)
	}
	if path := os.Getenv(recordEnv); path != "" {
		if err := recording.Save(path); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded the run in %s", path)
	}
	if len(evals) < 20 {
		t.Fatalf("%d evaluations; signals said: %s", len(evals), stderr.String())
	}
	// The bar is 20% of the recovery's length (signalstest.ETAError, met
	// by the recorded runs before the shard's first burst of completions
	// outruns the pace it has shown); a live run on a busy machine is
	// failed only past 30%, and its lines mark each ETA over the bar.
	v := signalstest.Judge(recording, evals, signals.DefaultThresholds(), 0.3)
	t.Logf("the advisor every %v, against the recovery measured:\n%s", evalUs, strings.Join(v.Lines, "\n"))
	for _, f := range v.Failures {
		t.Error(f)
	}
}
