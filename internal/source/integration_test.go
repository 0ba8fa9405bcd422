package source_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/internal/source"
)

// runSignals runs `shardctl signals ARGS -o json` and reads its report
// and exit code.
func runSignals(ctx context.Context, t testing.TB, bin string, args ...string) (signalsReport, int) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"signals", "-o", "json"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Errorf("shardctl signals %v: %v", args, err)
	}
	var r signalsReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Errorf("shardctl signals %v: %v\nstdout: %s\nstderr: %s", args, err, out.String(), errOut.String())
	}
	return r, code
}

type signalsReport struct {
	Level  string
	Shards []struct {
		Name    string
		Level   string
		Reasons []string
	}
}

func (r signalsReport) shard(name string) (level string, reasons []string) {
	for _, s := range r.Shards {
		if s.Name == name {
			return s.Level, s.Reasons
		}
	}
	return "missing", nil
}

func hasReason(reasons []string, word string) bool {
	for _, r := range reasons {
		if strings.Contains(r, word) {
			return true
		}
	}
	return false
}

// TestSignalsOnSimulatedShards drives one simulator past its knee and
// another at half its capacity, for the oldest and the newest Zeebe the
// simulator plays (8.5's metric names and Micrometer's), under the same
// load, and reads them through a real Prometheus server and by scraping:
// each knee is critical (scissors and queue), each half ok, both ways and
// in both versions; it also measures how long the advisor takes to call
// the knee. It ends as soon as both ways say so.
func TestSignalsOnSimulatedShards(t *testing.T) {
	t.Parallel()
	// One partition at 300 records/s: a one-task process completes up to
	// ~60 instances/s. knee gets twice that; half gets half.
	versions := simtest.Ends()
	metrics := map[string]string{}
	type loaded struct {
		s    *sim.Sim
		rate float64
	}
	var loads []loaded
	for _, v := range versions {
		knee := simtest.Start(t, sim.Config{Partitions: 1, Capacity: 300, Degrade: true, DegradeThreshold: 50, BacklogLimit: -1, Version: v})
		half := simtest.Start(t, sim.Config{Partitions: 1, Capacity: 300, BacklogLimit: -1, Version: v})
		metrics["knee-"+v.String()], metrics["half-"+v.String()] = knee.MetricsAddr().String(), half.MetricsAddr().String()
		loads = append(loads, loaded{knee, 120}, loaded{half, 30})
	}
	prom := proctest.Prometheus(t, "", metrics)
	bin := proctest.Build(t)

	ctx := budget.Context(t, 3*time.Minute)
	var wg sync.WaitGroup
	defer wg.Wait()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var clients []zbc.Client
	for _, l := range loads {
		c := simtest.Client(t, l.s.Addr().String())
		clients = append(clients, c)
		g := load.New(load.GRPC(c), load.Config{ProcessID: "order", JobType: "work", Rate: l.rate})
		if err := g.Deploy(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); g.Run(loadCtx) }()
	}
	start := time.Now()
	var scrapeArgs []string
	for name, addr := range metrics {
		scrapeArgs = append(scrapeArgs, "--scrape", name+"=http://"+addr+"/metrics")
	}

	// The scraping advisor samples from the start, as an operator without
	// a Prometheus server would, and is read until it calls the knee with
	// both reasons: the scissors need 30 s below half in its one-minute
	// window, which a starved machine reaches later.
	var (
		mu      sync.Mutex
		scraped signals.Report
	)
	scrapeDone := make(chan struct{})
	var stderr proctest.LockedBuffer
	watchSignals(loadCtx, t, &wg, &stderr, bin, func(r signals.Report) {
		mu.Lock()
		defer mu.Unlock()
		if kneeCalled(scraped) {
			return
		}
		scraped = r
		if kneeCalled(r) {
			close(scrapeDone)
		}
	}, append(scrapeArgs, "--every", "2s", "--sample", "2s", "--window", "1m")...)

	// The advisor, every 2 s through Prometheus, until it calls a knee.
	p, err := source.NewPrometheus(prom, source.Presets["zeebe"])
	if err != nil {
		t.Fatal(err)
	}
	p.Rate = 10 * time.Second
	// When each version's knee is first critical: the same load on the
	// same simulated capacity, so the same time within the polls' noise.
	calledAt := map[string]time.Duration{}
	for len(calledAt) < len(versions) && time.Since(start) < 100*time.Second {
		time.Sleep(2 * time.Second)
		now := time.Now()
		shards, err := p.Fetch(ctx, now, 2*time.Minute, 2*time.Second)
		if err != nil {
			t.Logf("fetch: %v", err)
			continue
		}
		r := signals.Evaluate(shards, now, 2*time.Minute, signals.DefaultThresholds())
		for _, s := range r.Shards {
			if _, called := calledAt[s.Name]; !called && strings.HasPrefix(s.Name, "knee-") && s.Level == signals.Critical {
				calledAt[s.Name] = time.Since(start)
				t.Logf("%s critical %v after the load began: %q", s.Name, calledAt[s.Name].Round(time.Second), s.Reasons)
			}
		}
	}
	oldest, newest := calledAt["knee-"+versions[0].String()], calledAt["knee-"+versions[1].String()]
	switch {
	case oldest == 0 || newest == 0:
		t.Errorf("the advisor did not call every knee within 100 s: %v", calledAt)
	case (oldest - newest).Abs() > budget.Of(10*time.Second):
		t.Errorf("the knees were called %v apart (%v): the same load should make them critical together", (oldest - newest).Abs().Round(time.Second), calledAt)
	}
	// Once the scissors have stayed open long enough for both reasons,
	// read through the command as a runbook would.
	var report signalsReport
	var code int
	for {
		report, code = runSignals(ctx, t, bin, "--prometheus", prom, "--window", "2m", "--step", "2s", "--rate", "10s")
		called := true
		for _, v := range versions {
			lvl, reasons := report.shard("knee-" + v.String())
			called = called && lvl == "critical" && hasReason(reasons, "scissors") && hasReason(reasons, "queue growing")
		}
		if called || ctx.Err() != nil {
			break
		}
		time.Sleep(2 * time.Second)
	}
	select {
	case <-scrapeDone:
	case <-ctx.Done():
	}
	t.Logf("both ways called the knee with both reasons %v after the load began", time.Since(start).Round(time.Second))
	stopLoad()
	// The load's job polls wait on a backlogged simulator until their
	// deadline, some 12 s: closing the connections ends them now.
	for _, c := range clients {
		_ = c.Close()
	}
	wg.Wait()

	for _, v := range versions {
		knee, half := "knee-"+v.String(), "half-"+v.String()
		lvl, reasons := report.shard(knee)
		if lvl != "critical" || !hasReason(reasons, "scissors") || !hasReason(reasons, "queue growing") {
			t.Errorf("prometheus: %s is %s with %q; want critical with scissors and queue reasons", knee, lvl, reasons)
		}
		if lvl, reasons := report.shard(half); lvl != "ok" {
			t.Errorf("prometheus: %s is %s with %q; want ok", half, lvl, reasons)
		}
	}
	if code != 3 {
		t.Errorf("prometheus: exit code %d, want 3 (critical reaches --fail-on critical)", code)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range scraped.Shards {
		switch {
		case strings.HasPrefix(s.Name, "knee-") && !kneeCalled(scraped):
			t.Errorf("scrape: %s is %s with %q; want critical with scissors and queue reasons; signals said: %s", s.Name, s.Level, s.Reasons, stderr.String())
		case strings.HasPrefix(s.Name, "half-") && s.Level != signals.OK:
			t.Errorf("scrape: %s is %s with %q; want ok", s.Name, s.Level, s.Reasons)
		}
	}
	if len(scraped.Shards) != len(metrics) {
		t.Errorf("scrape: %d shards, want %d (a knee and a half of each version); signals said: %s", len(scraped.Shards), len(metrics), stderr.String())
	}
}

// kneeCalled says whether r calls every shard named knee-* critical,
// with the scissors and the queue among its reasons.
func kneeCalled(r signals.Report) bool {
	knees := 0
	for _, s := range r.Shards {
		if strings.HasPrefix(s.Name, "knee-") {
			if s.Level != signals.Critical || !hasReason(s.Reasons, "scissors") || !hasReason(s.Reasons, "queue growing") {
				return false
			}
			knees++
		}
	}
	return knees > 0
}

// A gate with a target missing never passes: a scrape target that does
// not answer is a shard of unknown level, named with why, and the exit
// code is what --no-data says (fail: 3, the default; inconclusive: 6;
// pass: 0, the shard still listed).
func TestSignalsWithATargetMissing(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t)
	live := simtest.Start(t, sim.Config{Partitions: 1})
	dead := "http://127.0.0.1:" + fmt.Sprint(proctest.FreePort(t)) + "/metrics"
	ctx := budget.Context(t, 2*time.Minute)
	for _, tc := range []struct {
		noData string
		code   int
	}{{"", 3}, {"inconclusive", 6}, {"pass", 0}} {
		t.Run("no-data="+tc.noData, func(t *testing.T) {
			t.Parallel() // each samples for 3 s
			args := []string{"--scrape", "a=http://" + live.MetricsAddr().String() + "/metrics", "--scrape", "b=" + dead, "--sample", "3s"}
			if tc.noData != "" {
				args = append(args, "--no-data", tc.noData)
			}
			r, code := runSignals(ctx, t, bin, args...)
			level, reasons := r.shard("b")
			if code != tc.code || level != "unknown" || !hasReason(reasons, "connection refused") {
				t.Errorf("exit %d, b %s %v; want exit %d, b unknown saying why", code, level, reasons, tc.code)
			}
			if level, _ := r.shard("a"); level != "ok" {
				t.Errorf("a is %s, want ok", level)
			}
		})
	}
}

// A shard refusing at flow control's write-rate limit (8.6+) is named as
// such: its refusals are backpressure, and the reason says most met the
// write-rate limit, read from zeebe_flow_control_total by scraping.
func TestWriteRateRefusalsNamed(t *testing.T) {
	t.Parallel()
	s := simtest.Start(t, sim.Config{Partitions: 1, WriteRateLimit: 30, BacklogLimit: -1})
	c := simtest.Client(t, s.Addr().String())
	ctx := budget.Context(t, time.Minute)
	g := load.New(load.GRPC(c), load.Config{ProcessID: "order", JobType: "work", Rate: 40})
	if err := g.Deploy(ctx); err != nil {
		t.Fatal(err)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { g.Run(loadCtx) })
	defer func() {
		stopLoad()
		_ = c.Close()
		wg.Wait()
	}()
	sc, err := source.NewScrape([]source.Target{{Name: "limited", URL: "http://" + s.MetricsAddr().String() + "/metrics"}}, "zeebe", time.Second, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var sig signals.Signals
	budget.Eventually(t, 30*time.Second, "the write-rate limit named", func() bool {
		sc.ScrapeOnce(ctx)
		now := time.Now()
		shards, err := sc.Fetch(ctx, now, time.Minute, time.Second)
		if err != nil || len(shards) != 1 {
			return false
		}
		sig = signals.Evaluate(shards, now, time.Minute, signals.DefaultThresholds()).Shards[0]
		return hasReason(sig.Reasons, "write-rate limit")
	})
	if sig.WriteRateShare == nil || *sig.WriteRateShare < 0.9 || sig.Level < signals.Warn {
		t.Errorf("signals %+v: want a warning with every refusal at the write-rate limit", sig)
	}
}
