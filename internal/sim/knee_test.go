package sim

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
)

// TestKnee drives a --degrade simulator past its capacity with a rising
// load and reads the scissors from its metrics: instances created per
// second keep rising with the load while completions fall, and the queue
// of records not processed grows.
func TestKnee(t *testing.T) {
	s := startSim(t, Config{Partitions: 1, Capacity: 300, Degrade: true, DegradeThreshold: 50, BacklogLimit: -1})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "work"))
	w := c.NewJobWorker().JobType("work").Handler(func(jc worker.JobClient, job entities.Job) {
		// Bounded: past the knee a completion can wait for a long time,
		// and the test must not wait for it when it ends.
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(2*time.Second))
		defer cancel()
		_, _ = jc.NewCompleteJobCommand().JobKey(job.Key).Send(ctx)
	}).MaxJobsActive(256).Concurrency(16).PollInterval(10 * time.Millisecond).RequestTimeout(time.Second).BackoffSupplier(load.Backoff()).Open()
	t.Cleanup(w.Close)

	type sample struct{ created, completed, queue float64 }
	read := func() sample {
		m := scrapeAll(t, s)
		return sample{
			created:   metricValue(m, "zeebe_element_instance_events_total", `action="activated"`, `type="PROCESS"`),
			completed: metricValue(m, "zeebe_element_instance_events_total", `action="completed"`, `type="PROCESS"`),
			// Zeebe's dashboard: records written and not yet processed.
			queue: metricValue(m, "zeebe_log_appender_last_appended_position") - metricValue(m, "zeebe_stream_processor_last_processed_position"),
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// offer runs creations at rate per second for d, without waiting for
	// answers (clients of an overloaded cluster keep sending).
	offer := func(rate int, d time.Duration) sample {
		before := read()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		end := time.After(d)
		for {
			select {
			case <-tick.C:
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), budget.Of(10*time.Second))
					defer cancel()
					_, _ = c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx)
				}()
			case <-end:
				after := read()
				secs := d.Seconds()
				return sample{
					created:   (after.created - before.created) / secs,
					completed: (after.completed - before.completed) / secs,
					queue:     after.queue,
				}
			}
		}
	}
	low := offer(40, 2*time.Second)
	mid := offer(120, 2*time.Second)
	high := offer(250, 2*time.Second)
	t.Logf("created/s %.0f -> %.0f -> %.0f; completed/s %.0f -> %.0f -> %.0f; queue %.0f -> %.0f -> %.0f",
		low.created, mid.created, high.created, low.completed, mid.completed, high.completed, low.queue, mid.queue, high.queue)

	if !(high.created > 2*low.created) {
		t.Errorf("created/s did not rise with the load: %.0f -> %.0f", low.created, high.created)
	}
	if low.completed < 0.5*low.created {
		t.Errorf("below the knee completions should keep up: created %.0f/s, completed %.0f/s", low.created, low.completed)
	}
	if !(high.completed < low.completed) || !(high.completed < 0.5*high.created) {
		t.Errorf("past the knee completions should collapse: %.0f -> %.0f/s while %.0f/s are created", low.completed, high.completed, high.created)
	}
	if !(high.queue > mid.queue && mid.queue > low.queue) {
		t.Errorf("the queue of records not processed should grow: %.0f -> %.0f -> %.0f", low.queue, mid.queue, high.queue)
	}
}
