//go:build long

package source_test

// The advisor's false-alarm check is ten minutes long: `go test -tags long
// -run TestAdvisorQuietAtSeventyPercent ./internal/source/` (make
// test-long); the default suite leaves it out.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/internal/source"
)

// TestAdvisorQuietAtSeventyPercent runs a simulator at 70% of its knee for
// ten minutes and evaluates every 5 s, as `shardctl top` does: no warn, no
// critical.
func TestAdvisorQuietAtSeventyPercent(t *testing.T) {
	const (
		runFor = 10 * time.Minute
		window = 5 * time.Minute
	)
	s := simtest.Start(t, sim.Config{Partitions: 1, Capacity: 300, Degrade: true, DegradeThreshold: 50, BacklogLimit: -1})
	g := load.New(load.GRPC(simtest.Client(t, s.Addr().String())), load.Config{ProcessID: "order", JobType: "work", Rate: 42}) // knee ~60/s
	ctx := budget.Context(t, runFor+time.Minute)
	if err := g.Deploy(ctx); err != nil {
		t.Fatal(err)
	}
	scrape, err := source.NewScrape([]source.Target{{Name: "s", URL: "http://" + s.MetricsAddr().String() + "/metrics"}}, "zeebe", time.Second, window+time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	loadCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); g.Run(loadCtx) }()
	go func() { defer wg.Done(); scrape.Run(loadCtx) }()
	defer func() { stop(); wg.Wait() }()

	start := time.Now()
	evaluations, alarms := 0, 0
	var worstP99 float64
	for time.Since(start) < runFor {
		time.Sleep(5 * time.Second)
		now := time.Now()
		shards, err := scrape.Fetch(ctx, now, window, time.Second)
		if err != nil {
			continue
		}
		r := signals.Evaluate(shards, now, window, signals.DefaultThresholds())
		evaluations++
		for _, sh := range r.Shards {
			if sh.P99 != nil {
				worstP99 = max(worstP99, *sh.P99)
			}
			if sh.Level != signals.OK {
				alarms++
				t.Errorf("%v in: %s %q (ratio %v, queue %.0f, slope %.2f R² %.2f)", time.Since(start).Round(time.Second), sh.Level, sh.Reasons, sh.Ratio, sh.Queue, sh.QueueSlope, sh.QueueR2)
			}
		}
	}
	st := g.Stats()
	t.Logf("%d evaluations over %v at 42 instances/s: %d alarms; worst p99 %.3fs; load %+v", evaluations, runFor, alarms, worstP99, st)
}
