//go:build long

package sim

// TestDegradedRecovery overloads a simulator twice, about a minute and a
// half of load by its nature (a backlog must grow for 15 s to show that
// it drains slower than it grew): it runs in the long tier, `make
// test-long`. The knee itself is TestKnee's, in the fast tier.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
)

// TestDegradedRecovery checks --degrade's way back against the shape
// clusters show: a backlog built at twice the knee takes longer to drain
// once the load stops than it took to grow; and held at half its knee
// after an overload, a degraded partition works its backlog off, slowly
// (not a trickle for minutes, as without --degrade-max).
func TestDegradedRecovery(t *testing.T) {
	// This process's knee at 300 records/s is near 80 instances/s.
	s := startSim(t, Config{Partitions: 1, Capacity: 300, Degrade: true, BacklogLimit: -1})
	g := load.New(load.GRPC(newClient(t, s)), load.Config{ProcessID: "order", JobType: "work"})
	ctx, cancel := context.WithTimeout(context.Background(), budget.Of(4*time.Minute))
	defer cancel()
	if err := g.Deploy(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { g.Run(ctx) })
	queue := func() float64 {
		m := scrapeAll(t, s)
		return metricValue(m, "zeebe_log_appender_last_appended_position") - metricValue(m, "zeebe_stream_processor_last_processed_position")
	}
	owed := func() float64 {
		m := scrapeAll(t, s)
		return metricValue(m, "zeebe_element_instance_events_total", `action="activated"`, `type="PROCESS"`) -
			metricValue(m, "zeebe_element_instance_events_total", `action="completed"`, `type="PROCESS"`)
	}
	// until waits for the queue to empty and the instances owed to come
	// down to what the rate keeps in flight.
	until := func(what string, inFlight float64) time.Duration {
		from := time.Now()
		for queue() > DefaultDegradeThreshold || owed() > inFlight {
			if time.Since(from) > budget.Of(2*time.Minute) {
				t.Fatalf("%s: not caught up in 2m (queue %.0f, %.0f instances owed)", what, queue(), owed())
			}
			time.Sleep(100 * time.Millisecond)
		}
		return time.Since(from)
	}

	const grow = 15 * time.Second
	g.SetRate(160)
	time.Sleep(grow)
	g.SetRate(0)
	grown, owing := queue(), owed()
	drained := until("with the load stopped", 10)
	t.Logf("twice the knee for %v: %.0f records queued, %.0f instances owed; caught up %v after the load stopped", grow, grown, owing, drained.Round(100*time.Millisecond))
	if drained < grow {
		t.Errorf("a backlog built in %v at twice the knee was paid in %v: faster than it grew", grow, drained.Round(100*time.Millisecond))
	}

	g.SetRate(130)
	time.Sleep(5 * time.Second)
	g.SetRate(40)
	grown, owing = queue(), owed()
	recovered := until("at half the knee", 2*40)
	t.Logf("at half the knee: caught up with %.0f records queued and %.0f instances owed in %v", grown, owing, recovered.Round(100*time.Millisecond))
}
