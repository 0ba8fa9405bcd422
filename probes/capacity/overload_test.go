package capacity

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// The bars admission is held to past the knee: what it accepts completes
// in time, it accepts about what the federation can do, and it turns
// the rest away with RESOURCE_EXHAUSTED, never another error.
const (
	barInTime   = 0.95 // of the accepted, completed by the step's end + inTimeGrace
	barAccepted = 0.90 // of the knee
	// inTimeGrace is how long past a step its instances may take to
	// complete and still count in time.
	inTimeGrace = 10 * time.Second
)

// overloadFactors are the steps offered, as multiples of the knee.
var overloadFactors = []float64{1, 1.5, 2, 3}

// The timer process's tasks, either side of a ten-minute timer.
const (
	timerTaskA = "shardctl-timer-a"
	timerTaskB = "shardctl-timer-b"
)

// timerProcess is start → task A → a ten-minute timer → task B → end:
// an instance leaves its shard's queue once A is done and stays in
// flight, waiting, for ten minutes.
var timerProcess = load.ProcessOf("shardctl-timer", load.Task(timerTaskA), load.Timer("PT10M"), load.Task(timerTaskB))

// BenchmarkOverload is admission measured past the knee. For the
// built-in three-task process and a one-task one (jobs streamed): the
// capacity probe finds the knee through the proxy over four --degrade
// simulators, then the same proxy is offered 1, 1.5, 2 and 3 times that
// knee, $OVERLOAD_STEP each (default 60 s), back to back; then a fresh
// federation whose proxy runs with --instance-limit -1 gets the same
// steps at the same knee. It prints, step by step and for both, what was
// accepted, refused and failed, and what share of the accepted completed
// by the step's end + 10 s, then judges admission on against the bars
// (in time ≥ 95%, accepted ≥ 90% of the knee, only explicit refusals).
// The timer part offers a process with a ten-minute timer at 10% of the
// three-task knee, then at 60%, then at 2x, and counts refusals and how
// promptly task A's jobs are done. Missing a bar fails nothing: it is a
// measurement.
//
//	make bench-overload
//	go test -run '^$' -bench Overload -benchtime 1x -timeout 120m ./probes/capacity/
//	go test -run '^$' -bench Overload/timer -benchtime 1x -timeout 30m ./probes/capacity/
func BenchmarkOverload(b *testing.B) {
	bin := proctest.Build(b)
	step := envDuration(b, "OVERLOAD_STEP", time.Minute)
	b.Run("three-task", func(b *testing.B) {
		overload(b, bin, step, "the built-in three-task process", headlineConfig(b))
	})
	b.Run("one-task", func(b *testing.B) {
		cfg := headlineConfig(b)
		cfg.Process, cfg.ProcessName = load.Process("shardctl-overload", "shardctl-overload-1"), "overload.bpmn"
		overload(b, bin, step, "a one-task process", cfg)
	})
	b.Run("timer", func(b *testing.B) { timerOverload(b, bin, step) })
}

// overload runs one process's steps on both federations and prints them.
func overload(b *testing.B, bin string, step time.Duration, what string, cfg Config) {
	var knee float64
	var on, off []outcome
	if !b.Run("admission-on", func(b *testing.B) {
		f := startFederation(b, bin)
		knee = measureKnee(b, f, "admission on", cfg)
		on = overloadSteps(b, f, cfg, knee, step, "admission on")
		worstInTime, worstAccepted := 1.0, math.Inf(1)
		for _, o := range on {
			worstInTime = min(worstInTime, o.inTimeShare())
			worstAccepted = min(worstAccepted, o.acceptedPerSec()/knee)
		}
		b.ReportMetric(knee, "knee/s")
		b.ReportMetric(worstInTime, "in-time-min")
		b.ReportMetric(worstAccepted, "accepted/knee-min")
	}) {
		return
	}
	b.Run("instance-limit=-1", func(b *testing.B) {
		fmt.Printf("--instance-limit -1: the knee is not measured again: the steps are those of the admission-on run's knee, %.1f/s\n", knee)
		off = overloadSteps(b, startFederation(b, bin, "--instance-limit", "-1"), cfg, knee, step, "--instance-limit -1")
	})

	fmt.Printf("\noverload: %s, jobs streamed, the proxy over four simulators (%s); steps of %v at multiples of the knee %.1f/s, back to back; in time: completed by the step's end + %v\n",
		what, strings.Join(monolith, " "), step, knee, inTimeGrace)
	side := func(o outcome) string {
		return fmt.Sprintf(" %10.1f %5.0f%% %9.1f %6d %7.0f%% %11.1f", o.acceptedPerSec(), 100*o.acceptedPerSec()/knee,
			o.refusedPerSec(), o.failed+o.skipped, 100*o.inTimeShare(), o.completedPerSec())
	}
	cols := fmt.Sprintf(" %10s %6s %9s %6s %8s %11s", "ACCEPTED/S", "%KNEE", "REFUSED/S", "FAILED", "IN-TIME%", "COMPLETED/S")
	const onLabel, offLabel = " ADMISSION ON:", " --instance-limit -1:"
	fmt.Printf("%-5s %9s |%s%s |%s%s\n", "STEP", "OFFERED/S", onLabel, cols, offLabel, cols)
	for i, o := range on {
		row := fmt.Sprintf("%-5s %9.1f |%s%s |", o.name, o.rate, strings.Repeat(" ", len(onLabel)), side(o))
		if i < len(off) {
			row += strings.Repeat(" ", len(offLabel)) + side(off[i])
		}
		fmt.Println(row)
	}
	for _, o := range on {
		inTime, accepted, clean := o.inTimeShare() >= barInTime, o.acceptedPerSec() >= barAccepted*knee, o.failed+o.skipped == 0
		verdict := "meets the bars"
		if !inTime || !accepted || !clean {
			verdict = "MISSES"
		}
		line := fmt.Sprintf("admission on, %s: in time %.1f%% (bar %.0f%%) %s; accepted %.0f%% of the knee (bar %.0f%%) %s; failed %d (bar 0: only refusals) %s: %s",
			o.name, 100*o.inTimeShare(), 100*barInTime, mark(inTime), 100*o.acceptedPerSec()/knee, 100*barAccepted, mark(accepted), o.failed+o.skipped, mark(clean), verdict)
		if !clean {
			line += fmt.Sprintf(" (%d errors, first: %s; %d not sent, every call slot taken)", o.failed, o.firstErr, o.skipped)
		}
		fmt.Println(line)
	}
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISSED"
}

// measureKnee runs the capacity probe through f's proxy, prints its
// stages and returns the knee; a run that finds none is a setup error.
func measureKnee(b *testing.B, f federation, label string, cfg Config) float64 {
	cfg.Client = load.GRPC(simtest.Client(b, f.proxy.Addr))
	rep, err := Run(budget.Context(b, time.Hour), f.proxy.Addr, cfg)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("knee of %s through the proxy (%s): %v stages from %v/s by 10%%\n", rep.ProcessID, label, cfg.Stage, cfg.Start)
	for _, st := range rep.Stages {
		fmt.Printf("  stage %2d offered %6.1f/s started %6.1f/s completed %6.1f/s refused %6.1f/s\n",
			st.Stage, st.Offered, st.StartedPerSec, st.CompletedPerSec, float64(st.Refused)/st.Seconds)
	}
	fmt.Printf("  knee %.1f/s (stage %d); stopped: %s\n", rep.Knee, rep.KneeStage, rep.StopReason)
	if rep.Knee == 0 {
		b.Fatalf("no stage of %s was under the knee: nothing to offer multiples of", rep.ProcessID)
	}
	return rep.Knee
}

// overloadSteps offers cfg's process to f's proxy at each of
// overloadFactors times the knee, step long each, and returns what each
// step came to.
func overloadSteps(b *testing.B, f federation, cfg Config, knee float64, step time.Duration, label string) []outcome {
	conn := simtest.Client(b, f.proxy.Addr)
	cfg.Client = load.GRPC(conn)
	var phases []phase
	for _, x := range overloadFactors {
		phases = append(phases, phase{name: fmt.Sprintf("%.1fx", x), rate: x * knee, length: step})
	}
	rec := newEvents()
	g := generator(b, cfg, rec, nil)
	return drive(b, g, conn, rec, f, label, phases, nil)
}

// generator is cfg's load, every creation and completion heard by rec
// (edit may change the load's configuration), its process deployed.
func generator(b *testing.B, cfg Config, rec *events, edit func(*load.Config)) *load.Generator {
	if err := cfg.Check(); err != nil {
		b.Fatal(err)
	}
	lc, err := cfg.Load()
	if err != nil {
		b.Fatal(err)
	}
	lc.OnCreate, lc.OnComplete = rec.created, rec.completed
	if edit != nil {
		edit(&lc)
	}
	g := load.New(cfg.Client, lc)
	if err := g.Deploy(budget.Context(b, time.Minute)); err != nil {
		b.Fatalf("deploy %s: %v", lc.ProcessID, describe(err))
	}
	return g
}

// timerOverload offers the timer process to a fresh federation at 10%
// then 60% of the three-task knee, then at twice it: an instance waits
// ten minutes on its timer once task A is done, so a shard holds ever
// more instances in flight while its queue stays short.
func timerOverload(b *testing.B, bin string, step time.Duration) {
	f := startFederation(b, bin)
	conn := simtest.Client(b, f.proxy.Addr)
	client := load.GRPC(conn)
	rec := newEvents()
	// Task A is worked here, not by the load, to time each of its jobs:
	// the load hears only instances completing, and none does within
	// the timer's ten minutes. Deployed first: a simulator without timer
	// support refuses it before the knee is spent measuring.
	cfg := Config{Client: client, Process: timerProcess, ProcessName: "timer.bpmn", Stream: true}
	var taskA load.Worker
	g := generator(b, cfg, rec, func(lc *load.Config) {
		lc.JobTypes = lc.Final // task B
		taskA = load.Worker{JobType: timerTaskA, Concurrency: lc.Workers, Stream: lc.Stream, Timeout: lc.Timeout}
	})
	knee := measureKnee(b, f, "admission on, the timer's federation", headlineConfig(b))

	phases := []phase{
		{name: "10%", rate: 0.1 * knee, length: step},
		{name: "60%", rate: 0.6 * knee, length: step},
		{name: "2x", rate: 2 * knee, length: step / 2},
	}
	out := drive(b, g, conn, rec, f, "timer", phases, func(ctx context.Context) { client.Work(ctx, taskA, rec.completed) })

	fmt.Printf("\ntimer: start → %s → a PT10M timer → %s → end, the proxy (admission on) over four simulators (%s), offered 10%% then 60%% of the three-task knee %.1f/s for %v each, then 2x for %v\n",
		timerTaskA, timerTaskB, strings.Join(monolith, " "), knee, step, step/2)
	fmt.Printf("%-5s %9s %10s %8s %9s %6s %16s\n", "STEP", "OFFERED/S", "ACCEPTED/S", "REFUSED", "REFUSED/S", "FAILED", "TASK-A-IN-10S%")
	for _, o := range out {
		fmt.Printf("%-5s %9.1f %10.1f %8d %9.1f %6d %15.1f%%\n", o.name, o.rate, o.acceptedPerSec(), o.refused, o.refusedPerSec(), o.failed+o.skipped, 100*o.withinShare())
	}
	for _, o := range out[:2] {
		fmt.Printf("timer, %s of the knee: %d refused (want none) %s\n", o.name, o.refused, mark(o.refused == 0))
	}
	double := out[2]
	if double.firstRefusal >= 0 {
		fmt.Printf("timer, 2x: first refusal %v after the step began\n", double.firstRefusal.Round(10*time.Millisecond))
		b.ReportMetric(double.firstRefusal.Seconds(), "first-refusal-s")
	} else {
		fmt.Printf("timer, 2x: no refusal in the step's %v\n", double.length)
	}
	fmt.Printf("timer, 2x: %d of the %d instances accepted had task A's job completed within %v of their creation's answer (%.1f%%)\n",
		double.within, double.accepted, inTimeGrace, 100*double.withinShare())
	b.ReportMetric(knee, "knee/s")
	b.ReportMetric(float64(out[0].refused+out[1].refused), "refused-under-knee")
	b.ReportMetric(double.withinShare(), "task-a-in-10s")
}

// phase is a rate offered for a while.
type phase struct {
	name   string
	rate   float64 // offered a second
	length time.Duration
}

// outcome is what a phase came to. Creations and refusals count in the
// phase their answer came in.
type outcome struct {
	phase
	seconds  float64
	accepted int64
	refused  int64 // RESOURCE_EXHAUSTED
	failed   int64 // any other error
	skipped  int64 // not sent: every call slot taken
	firstErr string
	// completed counts completions heard during the phase, whatever
	// instance; inTime the phase's accepted instances completed by its
	// end + inTimeGrace, and within those completed within inTimeGrace of
	// their creation's answer.
	completed, inTime, within int64
	// firstRefusal is the first refusal's answer since the phase began
	// (-1: none).
	firstRefusal time.Duration
}

func (o outcome) acceptedPerSec() float64  { return float64(o.accepted) / o.seconds }
func (o outcome) refusedPerSec() float64   { return float64(o.refused) / o.seconds }
func (o outcome) completedPerSec() float64 { return float64(o.completed) / o.seconds }

// inTimeShare is inTime over accepted (1 with none accepted).
func (o outcome) inTimeShare() float64 { return share(o.inTime, o.accepted) }

// withinShare is within over accepted (1 with none accepted).
func (o outcome) withinShare() float64 { return share(o.within, o.accepted) }

func share(n, of int64) float64 {
	if of == 0 {
		return 1
	}
	return float64(n) / float64(of)
}

// drive runs g's load through phases back to back (and also, when not
// nil, alongside it until the end), then inTimeGrace more at rate 0 so
// that the last phase's window is observed, and sums each phase up. At
// each phase's end it prints the proxy's backlog of every shard. conn is
// the connection g's load (and also) speak on: drive closes it.
func drive(b *testing.B, g *load.Generator, conn io.Closer, rec *events, f federation, label string, phases []phase, also func(context.Context)) []outcome {
	total := inTimeGrace + time.Minute
	for _, ph := range phases {
		total += ph.length
	}
	ctx := budget.Context(b, total)
	loadCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { g.Run(loadCtx) })
	if also != nil {
		wg.Go(func() { also(loadCtx) })
	}
	// The Zeebe client's job worker cannot close with its job queue full,
	// as it is past the knee: its poller blocks pushing into the queue
	// that its closed dispatcher no longer reads (v8.5.20). Closing the
	// connection first ends the stream and the polls; the jobs queued then
	// fail at once, which empties the queue within the second, and the
	// workers can close. The client logs every poll that fails meanwhile:
	// not worth printing.
	var once sync.Once
	finish := func() {
		once.Do(func() {
			logs := log.Writer()
			log.SetOutput(io.Discard)
			defer log.SetOutput(logs)
			_ = conn.Close()
			time.Sleep(time.Second)
			stop()
			wg.Wait()
		})
	}
	defer finish()

	bounds := make([]time.Time, len(phases)+1)
	stats := make([]load.Stats, len(phases)+1)
	bounds[0], stats[0] = time.Now(), g.Stats()
	g.SetRate(phases[0].rate)
	for i, ph := range phases {
		if !sleepUntil(ctx, bounds[i].Add(ph.length)) {
			b.Fatalf("%s: out of time in step %s: %v", label, ph.name, ctx.Err())
		}
		next := 0.0
		if i+1 < len(phases) {
			next = phases[i+1].rate
		}
		g.SetRate(next)
		bounds[i+1], stats[i+1] = time.Now(), g.Stats()
		printBacklogs(f.admin, fmt.Sprintf("%s, end of %s", label, ph.name))
	}
	if !sleepUntil(ctx, time.Now().Add(inTimeGrace)) {
		b.Fatalf("%s: out of time after the last step: %v", label, ctx.Err())
	}
	finish()

	out := make([]outcome, len(phases))
	for i, ph := range phases {
		out[i] = rec.sum(ph, bounds[i], bounds[i+1])
		out[i].skipped = stats[i+1].Skipped - stats[i].Skipped
	}
	return out
}

// sleepUntil waits for t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// events are a load's creations as answered and its completions, by
// instance.
type events struct {
	mu        sync.Mutex
	creations []creation
	// done is when each instance completed (or, for the timer process,
	// its task A). An instance may complete before its creation is
	// answered (capacity's recorder.early): keyed by instance, either
	// order counts, the completion then falling before the answer.
	done map[int64]time.Time
}

type creation struct {
	at      time.Time // answered
	key     int64     // 0 unless accepted
	refused bool
	err     error // an error other than a refusal
}

func newEvents() *events { return &events{done: map[int64]time.Time{}} }

func (e *events) created(key int64, _ time.Duration, err error) {
	c := creation{at: time.Now(), key: key}
	switch {
	case errors.Is(err, load.ErrRefused):
		c.refused = true
	case err != nil:
		c.key, c.err = 0, err
	}
	e.mu.Lock()
	e.creations = append(e.creations, c)
	e.mu.Unlock()
}

func (e *events) completed(key int64) {
	now := time.Now()
	e.mu.Lock()
	if _, seen := e.done[key]; !seen {
		e.done[key] = now
	}
	e.mu.Unlock()
}

// sum is what ph, from start to end, came to.
func (e *events) sum(ph phase, start, end time.Time) outcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	o := outcome{phase: ph, seconds: end.Sub(start).Seconds(), firstRefusal: -1}
	in := func(t time.Time) bool { return !t.Before(start) && t.Before(end) }
	for _, c := range e.creations {
		if !in(c.at) {
			continue
		}
		switch {
		case c.refused:
			o.refused++
			if o.firstRefusal < 0 {
				o.firstRefusal = c.at.Sub(start)
			}
		case c.err != nil:
			o.failed++
			if o.firstErr == "" {
				o.firstErr = describe(c.err).Error()
			}
		default:
			o.accepted++
			if done, ok := e.done[c.key]; ok {
				if !done.After(end.Add(inTimeGrace)) {
					o.inTime++
				}
				if done.Sub(c.at) <= inTimeGrace {
					o.within++
				}
			}
		}
	}
	for _, t := range e.done {
		if in(t) {
			o.completed++
		}
	}
	return o
}

// printBacklogs prints each shard's backlog as the proxy's GET /shards
// reports it, as raw JSON: whatever fields it has.
func printBacklogs(url, label string) {
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		fmt.Printf("  %s: GET /shards: %v\n", label, err)
		return
	}
	defer resp.Body.Close()
	// The fields of proxyapi.ShardStatus read here.
	var doc struct {
		Shards []struct {
			ID      string          `json:"id"`
			Backlog json.RawMessage `json:"backlog"`
		} `json:"shards"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		fmt.Printf("  %s: GET /shards: %s: %v\n", label, resp.Status, err)
		return
	}
	for _, s := range doc.Shards {
		var compact bytes.Buffer
		if len(s.Backlog) == 0 || json.Compact(&compact, s.Backlog) != nil {
			compact.WriteString("(no backlog)")
		}
		fmt.Printf("  %s: %s backlog %s\n", label, s.ID, compact.String())
	}
}
