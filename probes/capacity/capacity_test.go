package capacity

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// processedMetric counts the records the simulator's --capacity limits:
// commands, not the events that follow them in the same step.
const processedMetric = "zeebe_stream_processor_processing_duration_seconds_count"

// kneeScenario is a capacity probe run against a simulated monolith of a
// known capacity: the simulator's --capacity (records a second), and the
// probe's stages (Client and Done are the scenario's).
type kneeScenario struct {
	capacity  float64
	threshold int // the simulator's DegradeThreshold; 0 for its default
	probe     Config
	limit     time.Duration // the run's time limit on a quiet core
}

// check runs the probe and judges it: it stops where completions
// collapse, and reports a knee within tolerance of the simulator's: the
// rate at which its record processing saturates. In instances a second
// that is the most it processes over what one instance costs it in
// records under the knee (creation, follow-ups, a completion per task,
// job pushes and polls), both read from its metrics stage by stage.
func (k kneeScenario) check(t *testing.T, tolerance float64) {
	ctx := budget.Context(t, k.limit)
	s := simtest.Start(t, sim.Config{Partitions: 1, Capacity: k.capacity, Degrade: true, DegradeThreshold: k.threshold, BacklogLimit: -1})
	processed := map[int]float64{} // records a second, by stage
	last, lastAt := simtest.SimMetric(t, s, processedMetric), time.Now()
	cfg := k.probe
	cfg.Client = load.GRPC(simtest.Client(t, s.Addr().String()))
	cfg.Done = func(st Stage) {
		now, at := simtest.SimMetric(t, s, processedMetric), time.Now()
		processed[st.Stage] = (now - last) / at.Sub(lastAt).Seconds()
		last, lastAt = now, at
	}
	if err := cfg.Check(); err != nil { // its defaults, for the judging
		t.Fatal(err)
	}
	rep, err := Run(ctx, s.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range rep.Stages {
		t.Logf("stage %2d offered %5.1f/s started %5.1f/s completed %5.1f/s (%3.0f%%) errors %.1f%% p99 %s; the simulator processed %.0f records/s",
			st.Stage, st.Offered, st.StartedPerSec, st.CompletedPerSec, 100*st.CompletedShare(), 100*st.ErrorShare, human.Latency(st.P99), processed[st.Stage])
	}
	// What the simulator spends is a fixed pace of job polls and pushes
	// plus so many records an instance: a line fitted to the stages
	// under the knee (all they started completed). Read off a ratio
	// instead, the fixed part makes an instance look dearer at low rates
	// than at the knee, and the reference knee too low.
	var completed, spent []float64
	for _, st := range rep.Stages[1:] {
		if st.Stage >= rep.KneeStage {
			break
		}
		completed, spent = append(completed, st.CompletedPerSec), append(spent, processed[st.Stage])
	}
	if len(completed) < 3 {
		t.Fatalf("%d stages under the knee: too few to tell what an instance costs", len(completed))
	}
	fixed, cost := fitLine(completed, spent)
	var most float64
	for _, p := range processed {
		most = max(most, p)
	}
	// The simulator's pace where it met the knee, the stage of the knee
	// or the first past it: on a machine busy with other work it
	// saturates lower then than at its best later.
	saturated := max(processed[rep.KneeStage], processed[rep.KneeStage+1])
	knee := (saturated - fixed) / cost
	t.Logf("knee %.1f/s (stage %d); the simulator: %.0f records/s and %.1f records an instance, at most %.0f records/s (configured %.0f), %.0f at the knee: %.1f instances/s; %s",
		rep.Knee, rep.KneeStage, fixed, cost, most, k.capacity, saturated, knee, rep.StopReason)
	// On a machine busy with every other package's tests the simulator
	// may saturate on the cores before its --capacity; the knee is judged
	// against what it did process, so only a simulator far off its
	// capacity (or past it) says the test measured something else.
	if most < 0.5*k.capacity || most > 1.05*k.capacity {
		t.Errorf("the simulator processed at most %.0f records/s, configured %.0f: its capacity is not what limits it", most, k.capacity)
	}
	if !rep.Stages[0].Warmup || rep.Stages[1].Offered != cfg.Start {
		t.Errorf("stages %+v: want a warm-up, then the first stage at --start", rep.Stages[:2])
	}
	if rep.KneeStage == 0 || rep.Knee < (1-tolerance)*knee || rep.Knee > (1+tolerance)*knee {
		t.Errorf("knee %.1f/s (stage %d): want within %.0f%% of the simulator's %.1f/s", rep.Knee, rep.KneeStage, 100*tolerance, knee)
	}
	if !strings.HasPrefix(rep.StopReason, "completed ") {
		t.Errorf("stop reason %q: want completions collapsing", rep.StopReason)
	}
	final := rep.Stages[len(rep.Stages)-1]
	if final.CompletedShare() >= cfg.StopCompleted || final.Stage <= rep.KneeStage {
		t.Errorf("last stage %+v: want it past the knee, completing under %.0f%% of its starts", final, 100*cfg.StopCompleted)
	}
}

// The knee search against a small simulated monolith, from a start near
// its knee with short stages: the scenario of TestKneeOfASimulatedMonolith
// (make test-long) in seconds. Short stages see few instances each, so
// the knee is judged within 15%, and the run stops once completions fall
// under 60% of the starts rather than waiting for their collapse (the
// stages under the knee complete 90% and more).
func TestKneeNearTheStart(t *testing.T) {
	t.Parallel()
	kneeScenario{capacity: 100, limit: 2 * time.Minute,
		probe: Config{Warmup: time.Second, Start: 10, Stage: 3 * time.Second, Stream: true, StopCompleted: 0.6, Drain: time.Second},
	}.check(t, 0.15)
}

// The knee search's decisions on stages whose counts are set, not
// measured: what ends a run, and which stage is the knee.
func TestStopsAndKnee(t *testing.T) {
	cfg := Config{StopCompleted: DefaultStopCompleted, StopErrors: DefaultStopErrors, StopP99: DefaultStopP99}
	stage := func(n int, started, completed int64) Stage {
		return Stage{Stage: n, Warmup: n == 0, Offered: float64(10 * (n + 1)), Started: started, Completed: completed}
	}
	for _, tt := range []struct {
		name string
		st   Stage
		stop string // a prefix of the reason; "" goes on
	}{
		{"under the knee", stage(1, 100, 99), ""},
		{"completions trail", stage(2, 100, 20), ""},
		{"completions collapsed", stage(3, 100, 14), "completed 14% of started"},
		{"a warm-up trails by design", stage(0, 100, 0), ""},
		{"errors", func() Stage { s := stage(2, 100, 100); s.ErrorShare = 0.02; return s }(), "errors 2.0% of offered"},
		{"a slow start call", func() Stage { s := stage(2, 100, 100); s.P99 = 6; return s }(), "start call p99"},
		{"nothing started", stage(4, 0, 0), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := cfg.stop(tt.st)
			if tt.stop == "" && got != "" || !strings.HasPrefix(got, tt.stop) {
				t.Errorf("stop %q, want %q", got, tt.stop)
			}
		})
	}

	// The knee is the last stage under it, not the last of an unbroken
	// run: one noisy stage does not hide the stages above it.
	noisy := stage(2, 100, 80)
	refused := stage(4, 100, 100)
	refused.ErrorShare = 0.05
	rep := Report{Stages: []Stage{stage(0, 100, 50), stage(1, 100, 100), noisy, stage(3, 100, 96), refused, stage(5, 100, 10)}}
	rec := &recorder{eventually: map[int]int64{1: 100, 5: 60}}
	rep.finish(rec)
	if rep.KneeStage != 3 || rep.Knee != 40 {
		t.Errorf("knee %v/s at stage %d, want 40/s at stage 3", rep.Knee, rep.KneeStage)
	}
	if got := rep.Stages[5].EventualShare(); got != 0.6 {
		t.Errorf("stage 5 completed %v of its starts eventually, want 0.6", got)
	}
}

// fitLine is the least-squares line y = a + b·x.
func fitLine(x, y []float64) (a, b float64) {
	n := float64(len(x))
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	return (sy - b*sx) / n, b
}

// Ctrl-C mid-stage: the probe stops its load at once and returns what it
// measured, the stage cut short included.
func TestInterrupted(t *testing.T) {
	t.Parallel()
	s := simtest.Start(t, sim.Config{Partitions: 1})
	c := load.GRPC(simtest.Client(t, s.Addr().String()))
	ctx, cancel := context.WithCancel(budget.Context(t, time.Minute))
	var stages int
	go func() {
		time.Sleep(2500 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	rep, err := Run(ctx, s.Addr().String(), Config{Client: c, Start: 20, Stage: time.Second, Done: func(Stage) { stages++ }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("stopped %v after the start, long after the cancel", took)
	}
	if !rep.Interrupted || rep.StopReason != "interrupted" || len(rep.Stages) != stages || len(rep.Stages) < 2 {
		t.Errorf("report %+v after %d stages heard", rep, stages)
	}
	if rep.KneeStage == 0 {
		t.Errorf("no knee from the whole stages of an idle simulator: %+v", rep)
	}
}

func TestConfigAndProcess(t *testing.T) {
	c := load.GRPC(simtest.Client(t, "127.0.0.1:1"))
	for _, tt := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"no client", Config{}, "no target"},
		{"negative start", Config{Client: c, Start: -1}, "want rates"},
		{"stop share of 1", Config{Client: c, StopErrors: 1}, "between 0 and 1"},
		{"not BPMN", Config{Client: c, Process: []byte("nope"), ProcessName: "x.bpmn"}, "x.bpmn"},
		{"no end after a task", Config{Client: c, ProcessName: "loop.bpmn", Process: []byte(load.DefinitionsHead +
			`<bpmn:process id="p" isExecutable="true"><bpmn:startEvent id="s"/><bpmn:serviceTask id="a"><bpmn:extensionElements><zeebe:taskDefinition type="a"/></bpmn:extensionElements></bpmn:serviceTask>` +
			`<bpmn:exclusiveGateway id="g"/><bpmn:endEvent id="e"/><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="a"/><bpmn:sequenceFlow id="f2" sourceRef="a" targetRef="g"/><bpmn:sequenceFlow id="f3" sourceRef="g" targetRef="e"/></bpmn:process></bpmn:definitions>`)},
			"no service task flows straight to an end event"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			err := cfg.Check()
			if err == nil {
				_, _, _, err = processOf(cfg)
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want %q", err, tt.err)
			}
		})
	}
	id, types, final, err := processOf(Config{ProcessName: "order.bpmn", Process: load.Process("order", "reserve", "charge", "ship")})
	if err != nil || id != "order" || strings.Join(types, ",") != "charge,reserve,ship" || strings.Join(final, ",") != "ship" {
		t.Errorf("processOf: %s %v %v %v", id, types, final, err)
	}
}
