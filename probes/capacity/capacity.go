// Package capacity finds a Zeebe cluster's knee the honest way: it counts
// what completed, not what was accepted. After a warm-up at the starting
// rate it offers process instances at a rate raised by a step every
// stage (open loop: the rate holds whatever the answers take), completes
// their jobs with real job workers, and stops when completions fall under
// a share of starts, when errors pass a share of calls, or when the start
// call's p99 passes a bound. The knee is the last stage whose starts all
// but completed (95%).
// It links no runtime: it reads the proxy and the registry through their
// api packages (internal/architecture checks).
package capacity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/bpmn"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/load"
)

// Defaults of the published method.
const (
	DefaultWarmup        = 15 * time.Minute
	DefaultStart         = 50.0
	DefaultStep          = 0.10
	DefaultStage         = 5 * time.Minute
	DefaultWorkers       = 16
	DefaultStopCompleted = 0.15
	DefaultStopErrors    = 0.01
	DefaultStopP99       = 5 * time.Second
	// KneeShare is the share of starts a stage must complete, and
	// KneeErrors the most of its offers that may fail, to be under the
	// knee.
	KneeShare  = 0.95
	KneeErrors = 0.01
	// DefaultMaxStages bounds a run that never meets a stop condition.
	DefaultMaxStages = 100
)

// The built-in process: three service tasks in a line.
const (
	BuiltinProcessID = "shardctl-capacity"
)

// BuiltinJobTypes are the built-in process's tasks, in order.
var BuiltinJobTypes = []string{"shardctl-capacity-1", "shardctl-capacity-2", "shardctl-capacity-3"}

// Config is what to probe and how.
type Config struct {
	// Client speaks to the target (a shard's gateway or the proxy), over
	// gRPC or REST.
	Client load.Client
	// Process is a BPMN document to deploy instead of the built-in
	// process; its job types are read from it.
	Process     []byte
	ProcessName string // its file name, for errors

	Warmup, Stage time.Duration
	Start, Step   float64
	// Workers is each job worker's concurrency; Stream has them take
	// jobs pushed on a stream instead of polling for them.
	Workers int
	Stream  bool
	// Stop conditions: completed under StopCompleted of started, errors
	// over StopErrors of offered, the start call's p99 over StopP99.
	StopCompleted, StopErrors float64
	StopP99                   time.Duration
	MaxStages                 int
	// Drain is the most the workers go on completing once the last stage
	// has ended (no new instances), so that each stage's instances that
	// complete at all are counted (default a stage, at least 30 s and at
	// most a minute); it ends sooner when none is left or none completes
	// for 3 s.
	Drain time.Duration
	// Progress hears, about once a second, the stage running and what
	// it has counted so far; Done hears every stage as it ends.
	Progress func(Stage)
	Done     func(Stage)
}

// Check fills zero fields with the defaults and refuses what cannot run.
func (c *Config) Check() error {
	if c.Client == nil {
		return errors.New("no target to probe")
	}
	c.Start = cmp.Or(c.Start, DefaultStart)
	c.Step = cmp.Or(c.Step, DefaultStep)
	c.StopCompleted = cmp.Or(c.StopCompleted, DefaultStopCompleted)
	c.StopErrors = cmp.Or(c.StopErrors, DefaultStopErrors)
	c.Stage = cmp.Or(c.Stage, DefaultStage)
	c.StopP99 = cmp.Or(c.StopP99, DefaultStopP99)
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.MaxStages = cmp.Or(c.MaxStages, DefaultMaxStages)
	c.Drain = cmp.Or(c.Drain, min(max(c.Stage, 30*time.Second), time.Minute))
	switch {
	case c.Start < 0 || c.Step <= 0 || c.Stage < 0 || c.Warmup < 0 || c.Workers < 0:
		return fmt.Errorf("start %v/s, step %v, stage %v, warm-up %v, workers %d: want rates and steps above 0, durations not negative", c.Start, c.Step, c.Stage, c.Warmup, c.Workers)
	case c.StopCompleted <= 0 || c.StopCompleted >= 1 || c.StopErrors <= 0 || c.StopErrors >= 1:
		return fmt.Errorf("stop shares %v and %v: want each between 0 and 1", c.StopCompleted, c.StopErrors)
	case c.StopP99 < 0:
		return fmt.Errorf("stop p99 %v: want it above 0", c.StopP99)
	}
	return nil
}

// Stage is what one stage measured. Rates are per second of the stage.
type Stage struct {
	Stage   int     `json:"stage"` // 0 is the warm-up
	Warmup  bool    `json:"warmup,omitempty"`
	Offered float64 `json:"offeredPerSec"`
	Seconds float64 `json:"seconds"`

	Started   int64 `json:"started"`
	Completed int64 `json:"completed"`
	Refused   int64 `json:"refused"` // RESOURCE_EXHAUSTED
	Failed    int64 `json:"failed"`  // other errors
	Skipped   int64 `json:"skipped"` // offers with every call slot taken

	StartedPerSec   float64 `json:"startedPerSec"`
	CompletedPerSec float64 `json:"completedPerSec"`
	// ErrorShare is refused, failed and skipped over offered.
	ErrorShare float64 `json:"errorShare"`
	// P50 and P99 of the start call (seconds); NaN-free: 0 with no call.
	P50 float64 `json:"p50Seconds"`
	P99 float64 `json:"p99Seconds"`
	// Eventually counts the stage's instances completed by the end of
	// the run and its drain, whenever they completed: what became of the
	// work the cluster accepted.
	Eventually int64 `json:"completedEventually"`
}

// EventualShare is the stage's instances completed by the run's end over
// those started (1 with no start).
func (s Stage) EventualShare() float64 {
	if s.Started == 0 {
		return 1
	}
	// An instance answered as a stage ends may be counted started in the
	// next and completed in this one: at most 100%.
	return min(float64(s.Eventually)/float64(s.Started), 1)
}

// underKnee is a stage that completed what it started and refused
// almost nothing.
func (s Stage) underKnee() bool {
	return !s.Warmup && s.CompletedShare() >= KneeShare && s.ErrorShare <= KneeErrors
}

// CompletedShare is completions over starts (1 with no start).
func (s Stage) CompletedShare() float64 {
	if s.Started == 0 {
		return 1
	}
	return float64(s.Completed) / float64(s.Started)
}

// Report is a run.
type Report struct {
	Target    string  `json:"target"`
	ProcessID string  `json:"processId"`
	Stages    []Stage `json:"stages"`
	// Knee is the offered rate of the last stage under the knee (it
	// completed 95% of what it started and refused at most 1% of the
	// offers), and KneeStage its number (0: none was).
	Knee      float64 `json:"kneePerSec"`
	KneeStage int     `json:"kneeStage"`
	// StopReason says why the run ended.
	StopReason  string `json:"stopReason"`
	Interrupted bool   `json:"interrupted,omitempty"`
}

// Run deploys the process, warms up, then raises the rate stage by stage
// until a stop condition, ctx's end or MaxStages. On ctx's end it returns
// what it measured (the stage cut short included) with ctx's error.
func Run(ctx context.Context, target string, cfg Config) (Report, error) {
	if err := cfg.Check(); err != nil {
		return Report{}, err
	}
	lc, err := cfg.Load()
	if err != nil {
		return Report{}, err
	}
	rep := Report{Target: target, ProcessID: lc.ProcessID}
	rec := &recorder{stageOf: map[int64]int{}, early: map[int64]struct{}{}, eventually: map[int]int64{}}
	lc.OnCreate, lc.OnComplete = rec.note, rec.completed
	g := load.New(cfg.Client, lc)
	if err := g.Deploy(ctx); err != nil {
		return rep, fmt.Errorf("deploy %s: %w", lc.ProcessID, describe(err))
	}
	loadCtx, stopLoad := context.WithCancel(context.Background())
	g.SetRate(0)
	var wg sync.WaitGroup
	wg.Go(func() { g.Run(loadCtx) })
	defer func() { stopLoad(); wg.Wait() }()

	// end stops offering, lets the workers finish what is in flight and
	// sums the run up.
	end := func(reason string) (Report, error) {
		rep.StopReason = reason
		g.SetRate(0)
		rec.drain(ctx, cfg.Drain)
		rep.finish(rec)
		return rep, nil
	}
	rate := cfg.Start
	for n := 0; n <= cfg.MaxStages; n++ {
		length := cfg.Stage
		if n == 0 {
			if cfg.Warmup == 0 {
				continue
			}
			length = cfg.Warmup
		}
		g.SetRate(rate)
		st, done := runStage(ctx, g, rec, n, rate, length, cfg.Progress)
		rep.Stages = append(rep.Stages, st)
		if cfg.Done != nil {
			cfg.Done(st)
		}
		if !done {
			rep.Interrupted = true
			rep.StopReason = "interrupted"
			rep.finish(rec)
			return rep, ctx.Err()
		}
		if reason := cfg.stop(st); reason != "" {
			return end(reason)
		}
		if n > 0 {
			rate *= 1 + cfg.Step
		}
	}
	return end(fmt.Sprintf("%d stages without reaching a stop condition", cfg.MaxStages))
}

// finish sets the knee, and what each stage's instances came to.
func (r *Report) finish(rec *recorder) {
	r.Knee, r.KneeStage = 0, 0
	for _, st := range r.Stages {
		// The last one, not the last of an unbroken run: one short
		// stage's noise must not hide the stages above it.
		if st.underKnee() {
			r.Knee, r.KneeStage = st.Offered, st.Stage
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i := range r.Stages {
		r.Stages[i].Eventually = rec.eventually[r.Stages[i].Stage]
	}
}

// stop is why a stage ends the run, or "".
func (c *Config) stop(st Stage) string {
	switch {
	// The warm-up fills the pipeline: its completions trail its starts
	// by the time an instance takes, which says nothing of the knee.
	case !st.Warmup && st.Started > 0 && st.CompletedShare() < c.StopCompleted:
		return fmt.Sprintf("completed %.0f%% of started (under %.0f%%)", 100*st.CompletedShare(), 100*c.StopCompleted)
	case st.ErrorShare > c.StopErrors:
		return fmt.Sprintf("errors %.1f%% of offered (over %.0f%%): %d refused (RESOURCE_EXHAUSTED), %d failed, %d not sent (every call slot taken)",
			100*st.ErrorShare, 100*c.StopErrors, st.Refused, st.Failed, st.Skipped)
	case st.P99 > c.StopP99.Seconds():
		return fmt.Sprintf("start call p99 %s (over %v)", human.Latency(st.P99), c.StopP99)
	}
	return ""
}

// runStage runs one stage at rate for length; done is false when ctx
// ended it.
func runStage(ctx context.Context, g *load.Generator, rec *recorder, n int, rate float64, length time.Duration, progress func(Stage)) (Stage, bool) {
	start := time.Now()
	before := g.Stats()
	rec.reset()
	measure := func() Stage {
		took := time.Since(start)
		now := g.Stats()
		st := Stage{Stage: n, Warmup: n == 0, Offered: rate, Seconds: took.Seconds(),
			Started: now.Created - before.Created, Completed: now.Completed - before.Completed,
			Refused: now.Refused - before.Refused, Failed: now.Failed - before.Failed, Skipped: now.Skipped - before.Skipped}
		if secs := took.Seconds(); secs > 0 {
			st.StartedPerSec, st.CompletedPerSec = float64(st.Started)/secs, float64(st.Completed)/secs
		}
		if offered := now.Offered - before.Offered; offered > 0 {
			st.ErrorShare = float64(st.Refused+st.Failed+st.Skipped) / float64(offered)
		}
		st.P50, st.P99 = rec.quantiles()
		return st
	}
	rec.at(n)
	end := time.NewTimer(length)
	defer end.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return measure(), false
		case <-end.C:
			return measure(), true
		case <-tick.C:
			if progress != nil {
				progress(measure())
			}
		}
	}
}

// Load is the load the probe offers, at rate 0: its process and how its
// jobs are worked, the way Run drives them (the signal tests drive a
// shard with the same). Call Check first.
func (c Config) Load() (load.Config, error) {
	id, jobTypes, final, err := processOf(c)
	if err != nil {
		return load.Config{}, err
	}
	return load.Config{ProcessID: id, JobTypes: jobTypes, Final: final, Process: c.Process,
		Workers: c.Workers, Stream: c.Stream, MaxInFlight: 1 << 16, Timeout: 2 * c.StopP99}, nil
}

// processOf is the process to run: its id, its job types and those that
// complete an instance.
func processOf(cfg Config) (id string, jobTypes, final []string, err error) {
	if cfg.Process == nil {
		return BuiltinProcessID, BuiltinJobTypes, BuiltinJobTypes[2:], nil
	}
	procs, err := bpmn.Parse(cfg.ProcessName, cfg.Process)
	if err != nil {
		return "", nil, nil, fmt.Errorf("%s: %w", cfg.ProcessName, err)
	}
	for _, p := range procs {
		if p.NoneStart == nil {
			continue
		}
		for _, el := range p.Elements {
			if el.Kind != bpmn.ServiceTask {
				continue
			}
			if !slices.Contains(jobTypes, el.JobType) {
				jobTypes = append(jobTypes, el.JobType)
			}
			// A task that flows straight to an end event completes its
			// instance when its job does.
			for _, f := range el.Outgoing {
				if f.Target.Kind == bpmn.EndEvent && !slices.Contains(final, el.JobType) {
					final = append(final, el.JobType)
				}
			}
		}
		if len(final) == 0 {
			return "", nil, nil, fmt.Errorf("%s: process %s: no service task flows straight to an end event, so completed instances cannot be counted", cfg.ProcessName, p.ID)
		}
		slices.Sort(jobTypes)
		return p.ID, jobTypes, final, nil
	}
	return "", nil, nil, fmt.Errorf("%s: no process with a none start event to create instances of", cfg.ProcessName)
}

// describe turns a gRPC error into its code and message.
func describe(err error) error {
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return fmt.Errorf("%s: %s", st.Code(), st.Message())
	}
	return err
}

// recorder keeps the start calls' latencies of the stage running, and
// which stage each instance started in, to count it when it completes.
type recorder struct {
	mu         sync.Mutex
	stage      int
	lat        []time.Duration
	stageOf    map[int64]int      // instances started, not completed yet
	early      map[int64]struct{} // completed before their start was answered
	eventually map[int]int64      // instances completed, by the stage they started in
	lastDone   time.Time
}

func (r *recorder) at(stage int) {
	r.mu.Lock()
	r.stage = stage
	r.mu.Unlock()
}

func (r *recorder) note(key int64, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, done := r.early[key]; done {
		delete(r.early, key)
		r.eventually[r.stage]++
	} else if key != 0 {
		r.stageOf[key] = r.stage
	}
	if errors.Is(err, load.ErrRefused) {
		// A refusal is counted, not timed: it is answered at once and
		// would pull the start call's quantiles down.
		return
	}
	r.lat = append(r.lat, took)
}

func (r *recorder) completed(key int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastDone = time.Now()
	if stage, ok := r.stageOf[key]; ok {
		r.eventually[stage]++
		delete(r.stageOf, key)
	} else {
		// Jobs streamed to a fast worker can finish an instance before
		// its creator hears the answer.
		r.early[key] = struct{}{}
	}
}

// drain waits, at most d, for the instances in flight to complete: until
// none is left, or none has completed for a few seconds.
func (r *recorder) drain(ctx context.Context, d time.Duration) {
	const quiet = 3 * time.Second
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		r.mu.Lock()
		left, last := len(r.stageOf), r.lastDone
		r.mu.Unlock()
		if left == 0 || time.Since(last) > quiet {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.lat = r.lat[:0]
	r.mu.Unlock()
}

func (r *recorder) quantiles() (p50, p99 float64) {
	r.mu.Lock()
	lat := slices.Clone(r.lat)
	r.mu.Unlock()
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	at := func(q float64) float64 {
		return lat[min(int(math.Ceil(q*float64(len(lat))))-1, len(lat)-1)].Seconds()
	}
	return at(0.50), at(0.99)
}
