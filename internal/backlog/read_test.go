package backlog_test

import (
	"os"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }

// The same backlog through a real Prometheus server as by scraping: an
// instance in flight on a simulator; a shard Prometheus has no series of
// is unknown, never empty.
func TestReadersAgree(t *testing.T) {
	s := simtest.Start(t, sim.Config{Partitions: 2})
	zc := simtest.Client(t, s.Addr().String())
	ctx := budget.Context(t, 30*time.Second)
	if _, err := zc.NewDeployResourceCommand().AddResource(load.Process("order", "pay"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx); err != nil {
		t.Fatal(err)
	}
	metrics := "http://" + s.MetricsAddr().String() + "/metrics"
	target := backlog.Target{Shard: "blue-1", MetricsURL: metrics}

	scraped := backlog.Scrape{}.Read(ctx, target)
	if !scraped.Known() || scraped.InFlight != 1 || scraped.OpenJobs["pay"] != 1 || scraped.Empty() {
		t.Fatalf("scraped: %s (%+v)", scraped.Summary(), scraped)
	}
	// What pacing reads: positions, creations and the processing latency.
	if scraped.Created != 1 || scraped.Processed <= 0 || scraped.Committed < scraped.Processed || scraped.LatencyCount <= 0 || scraped.LatencySum < 0 {
		t.Errorf("scraped for pacing: created %v, positions %v/%v, latency %v s over %v records", scraped.Created, scraped.Committed, scraped.Processed, scraped.LatencySum, scraped.LatencyCount)
	}

	prom := proctest.Prometheus(t, "", map[string]string{"blue-1": s.MetricsAddr().String()})
	p, err := backlog.NewPrometheus(prom)
	if err != nil {
		t.Fatal(err)
	}
	var got backlog.Backlog
	// Until both readers saw the simulator settled: a scrape, Prometheus's
	// or ours, taken while it still processed records shows a lag
	// (committed, not yet processed) the other reading need not have.
	budget.Eventually(t, 30*time.Second, "Prometheus and a scrape to read the shard's settled series", func() bool {
		got = p.Read(ctx, target)
		if got.Known() && got.Lag != scraped.Lag {
			scraped = backlog.Scrape{}.Read(ctx, target)
		}
		return got.Known() && got.Lag == scraped.Lag
	})
	if got.InFlight != scraped.InFlight || got.Lag != scraped.Lag || got.Incidents != scraped.Incidents || got.OpenJobs["pay"] != 1 {
		t.Errorf("through Prometheus: %s; scraped: %s", got.Summary(), scraped.Summary())
	}
	if got.Created != scraped.Created || got.Processed != scraped.Processed || got.LatencyCount != scraped.LatencyCount || got.LatencySum != scraped.LatencySum {
		t.Errorf("through Prometheus for pacing: created %v, processed %v, latency %v/%v; scraped: %v, %v, %v/%v",
			got.Created, got.Processed, got.LatencySum, got.LatencyCount, scraped.Created, scraped.Processed, scraped.LatencySum, scraped.LatencyCount)
	}
	// By instance, for targets without a cluster label.
	if b := p.Read(ctx, backlog.Target{Shard: "other-name", MetricsURL: metrics}); b.InFlight != 1 {
		t.Errorf("by instance: %s", b.Summary())
	}
	if b := p.Read(ctx, backlog.Target{Shard: "nobody"}); b.Known() || b.Empty() || b.Error == "" {
		t.Errorf("a shard Prometheus does not know: %+v", b)
	}
}
