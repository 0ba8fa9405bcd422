package proxy

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// startShards runs n simulated Zeebe clusters on free loopback ports.
func startShards(t testing.TB, n int, cfg sim.Config) []*sim.Sim {
	t.Helper()
	var out []*sim.Sim
	for range n {
		out = append(out, simtest.Start(t, cfg))
	}
	return out
}

func shardConfigs(shards []*sim.Sim) []ShardConfig {
	var out []ShardConfig
	for i, s := range shards {
		out = append(out, ShardConfig{ID: fmt.Sprintf("shard-%d", i+1), Addr: s.Addr().String(), Slot: i + 1})
	}
	return out
}

func startProxy(t testing.TB, cfg Config) *Proxy {
	t.Helper()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	if cfg.Front == "" {
		cfg.Front = os.Getenv(envFront)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(time.Second))
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

// envFront names the front the tests' proxies serve with ("": the
// default).
const envFront = "SHARDCTL_TEST_FRONT"

func newClient(t testing.TB, addr string) zbc.Client { return simtest.Client(t, addr) }

func simMetric(t testing.TB, s *sim.Sim, name string, labels ...string) float64 {
	return simtest.SimMetric(t, s, name, labels...)
}

func proxyMetric(t testing.TB, p *Proxy, name string, labels ...string) float64 {
	return simtest.Metric(t, "http://"+p.AdminAddr().String()+"/metrics", name, labels...)
}

// bpmnHead opens the tests' own BPMN documents.
const bpmnHead = load.DefinitionsHead
