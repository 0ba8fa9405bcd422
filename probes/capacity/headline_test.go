package capacity

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }

// monolith is one simulated cluster that collapses past its knee as an
// overloaded Zeebe does: one partition of 200 records a second, new
// instances served first, no backpressure.
var monolith = []string{"--partitions", "1", "--capacity", "200", "--degrade", "--backlog-limit", "-1"}

// BenchmarkFederationHeadline is the product's claim, measured: the
// capacity probe, same process and stages, against one simulated
// monolith and against the proxy in front of four identical ones. It
// prints both runs stage by stage, the knees and their ratio, and what
// each completed past its own knee.
//
//	make bench-capacity
//	go test -run '^$' -bench FederationHeadline -benchtime 1x -timeout 30m ./probes/capacity/
func BenchmarkFederationHeadline(b *testing.B) {
	bin := proctest.Build(b)
	// The published stop conditions: the federation's run ends once it
	// refuses more than 1% of the offers, the monolith's once its
	// completions collapse.
	cfg := headlineConfig(b)
	stage := cfg.Stage

	one := startMonolith(b, bin)
	proxy := startFederation(b, bin).proxy

	var reps [2]Report
	for range b.N {
		for i, target := range []string{one.Addr, proxy.Addr} {
			c := simtest.Client(b, target)
			run := cfg
			run.Client = load.GRPC(c)
			rep, err := Run(budget.Context(b, time.Hour), target, run)
			if err != nil {
				b.Fatal(err)
			}
			reps[i] = rep
		}
	}
	single, fed := reps[0], reps[1]
	fmt.Printf("capacity probe, %v stages from %v/s by 10%%, the built-in three-task process, jobs streamed\n", stage, cfg.Start)
	fmt.Printf("one simulated monolith (%s) | the proxy over four of them\n", strings.Join(monolith, " "))
	fmt.Printf("%-6s %9s | %9s %11s %9s %10s | %9s %11s %9s %10s %9s\n", "STAGE", "OFFERED/S",
		"STARTED/S", "COMPLETED/S", "COMPLETED", "EVENTUALLY", "STARTED/S", "COMPLETED/S", "COMPLETED", "EVENTUALLY", "REFUSED/S")
	for n := 1; n < max(len(single.Stages), len(fed.Stages)); n++ {
		// Both runs offer the same rates: the longer one has them all.
		longer := single
		if len(fed.Stages) > len(single.Stages) {
			longer = fed
		}
		row := fmt.Sprintf("%-6d %9.1f |", n, longer.Stages[n].Offered)
		if n < len(single.Stages) {
			st := single.Stages[n]
			row += fmt.Sprintf(" %9.1f %11.1f %8.0f%% %9.0f%% |", st.StartedPerSec, st.CompletedPerSec, 100*st.CompletedShare(), 100*st.EventualShare())
		} else {
			row += strings.Repeat(" ", 44) + "|"
		}
		if n < len(fed.Stages) {
			st := fed.Stages[n]
			row += fmt.Sprintf(" %9.1f %11.1f %8.0f%% %9.0f%% %9.1f", st.StartedPerSec, st.CompletedPerSec, 100*st.CompletedShare(), 100*st.EventualShare(), float64(st.Refused)/st.Seconds)
		}
		fmt.Println(row)
	}
	fmt.Printf("knee: one %.1f/s (stage %d), federation %.1f/s (stage %d): %.2fx\n", single.Knee, single.KneeStage, fed.Knee, fed.KneeStage, fed.Knee/single.Knee)
	fmt.Printf("stopped: one: %s; federation: %s\n", single.StopReason, fed.StopReason)
	singlePast, fedPast := pastKnee(single), pastKnee(fed)
	fmt.Printf("past its knee (stages %d-%d): one started %.0f and completed %.0f%% of them (%.0f%% in the last stage); "+
		"past its knee (stages %d-%d): the federation accepted %.0f, completed %.0f%% of them, and refused %.0f%% of the offers (RESOURCE_EXHAUSTED)\n",
		single.KneeStage+1, len(single.Stages)-1, singlePast.started, 100*singlePast.share, 100*single.Stages[len(single.Stages)-1].EventualShare(),
		fed.KneeStage+1, len(fed.Stages)-1, fedPast.started, 100*fedPast.share, 100*fedPast.refused)
	b.ReportMetric(single.Knee, "knee-one/s")
	b.ReportMetric(fed.Knee, "knee-federation/s")
	b.ReportMetric(fed.Knee/single.Knee, "ratio")
}

// headlineConfig is the headline's probe: a warm-up of two stages at
// 20/s, then stages of $CAPACITY_STAGE (default 10 s), the built-in
// process with its jobs streamed.
func headlineConfig(b *testing.B) Config {
	stage := envDuration(b, "CAPACITY_STAGE", 10*time.Second)
	return Config{Warmup: 2 * stage, Start: 20, Stage: stage, Stream: true}
}

// envDuration is the duration in $name, or def when it is not set.
func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a duration above 0 (%v)", name, s, err)
	}
	return d
}

// startMonolith starts one simulated monolith; it stops when the
// benchmark ends.
func startMonolith(b *testing.B, bin string) *proctest.Process {
	return proctest.Start(b, bin, nil, append([]string{"sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"}, monolith...)...)
}

// federation is the proxy in front of four simulated monoliths.
type federation struct {
	proxy *proctest.Process
	// admin is the proxy's GET /shards URL.
	admin string
}

// startFederation starts four simulated monoliths and the proxy over
// them, which reads each one's backlog from its metrics, with its
// default flags and proxyArgs; all stop when the benchmark ends.
func startFederation(b *testing.B, bin string, proxyArgs ...string) federation {
	args := append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, proxyArgs...)
	for i := range 4 {
		s := startMonolith(b, bin)
		args = append(args, "--shard", fmt.Sprintf("shard-%d=%s,metrics=%s", i+1, s.Addr, s.Line(b, "metrics on ")))
	}
	proxy := proctest.Start(b, bin, nil, args...)
	return federation{proxy: proxy, admin: proxy.Line(b, "admin on ")}
}

type past struct{ started, share, refused float64 }

// pastKnee sums the stages after a run's knee: what they started, the
// share of it completed by the run's end, and refusals over offers.
func pastKnee(r Report) past {
	var started, completed, refused, offered float64
	for _, st := range r.Stages {
		if !st.Warmup && st.Stage > r.KneeStage {
			started += float64(st.Started)
			completed += float64(st.Eventually)
			refused += float64(st.Refused)
			offered += float64(st.Started + st.Refused + st.Failed + st.Skipped)
		}
	}
	if started == 0 || offered == 0 {
		return past{}
	}
	return past{started, completed / started, refused / offered}
}
