package sim

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/search"
)

// The simulator must never be the bottleneck of a proxy benchmark: these
// measure it with the real Zeebe Go client, 64 requests in flight, at
// --capacity 0. Run with `make bench-sim`.

const benchConcurrency = 64

// runConcurrently calls fn n times from benchConcurrency goroutines and
// returns the calls per second.
func runConcurrently(b testing.TB, n int, fn func() error) float64 {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	for range benchConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := fn(); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d calls failed", f, n)
	}
	return float64(n) / elapsed.Seconds()
}

func BenchmarkCreateProcessInstance(b *testing.B) {
	s := startSim(b, Config{Partitions: 3, BacklogLimit: -1})
	c := newClient(b, s)
	deploy(b, c, "p.bpmn", linearProcess("p", 3, "work"))
	ctx := context.Background()
	b.ResetTimer()
	rate := runConcurrently(b, b.N, func() error {
		_, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx)
		return err
	})
	b.ReportMetric(rate, "creates/s")
	b.StopTimer()
	if got := scrape(b, s, "zeebe_executed_instances_total", `action="activated"`); got != float64(b.N) {
		b.Fatalf("the simulator counted %v instances for %d creates", got, b.N)
	}
}

func BenchmarkCompleteJob(b *testing.B) {
	s := startSim(b, Config{Partitions: 3, BacklogLimit: -1})
	c := newClient(b, s)
	deploy(b, c, "p.bpmn", linearProcess("p", 3, "work"))
	ctx := context.Background()
	// Instances whose jobs the benchmark completes, activated in batches
	// beforehand so that only CompleteJob is timed.
	runConcurrently(b, b.N, func() error {
		_, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx)
		return err
	})
	keys := make(chan int64, b.N)
	for len(keys) < b.N {
		jobs, err := c.NewActivateJobsCommand().JobType("work").MaxJobsToActivate(1000).Timeout(time.Hour).Send(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, j := range jobs {
			keys <- j.Key
		}
	}
	b.ResetTimer()
	rate := runConcurrently(b, b.N, func() error {
		_, err := c.NewCompleteJobCommand().JobKey(<-keys).Send(ctx)
		return err
	})
	b.ReportMetric(rate, "completions/s")
	b.StopTimer()
	if got := scrape(b, s, "zeebe_job_events_total", `action="completed"`); got != float64(b.N) {
		b.Fatalf("the simulator counted %v completions for %d calls", got, b.N)
	}
}

// BenchmarkSearch is one search of 2000 active instances, newest first,
// a page of 100: what a shard does for each search a proxy sends it.
func BenchmarkSearch(b *testing.B) {
	s := startSim(b, Config{Partitions: 3, BacklogLimit: -1})
	c := newClient(b, s)
	deploy(b, c, "p.bpmn", linearProcess("p", 1, "work"))
	ctx := context.Background()
	runConcurrently(b, 2000, func() error {
		_, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx)
		return err
	})
	q, err := search.Parse(search.ProcessInstances, []byte(`{"filter":{"state":"ACTIVE"},"sort":[{"field":"startDate","order":"DESC"}],"page":{"limit":100}}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		a, err := queries{s.cluster}.Search(ctx, search.ProcessInstances, q)
		if err != nil || len(a.Body) == 0 {
			b.Fatal(err)
		}
	}
}
