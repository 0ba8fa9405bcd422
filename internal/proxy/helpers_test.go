package proxy

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

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

// shardStatus is one shard as the proxy's GET /shards reports it.
func shardStatus(p *Proxy, id string) proxyapi.ShardStatus {
	for _, st := range p.Shards() {
		if st.ID == id {
			return st
		}
	}
	return proxyapi.ShardStatus{}
}

// shardsReady waits for the proxy to have n shards, each replayed the
// ledger (a shard from the registry takes work only then).
func shardsReady(t testing.TB, p *Proxy, n int) {
	t.Helper()
	budget.Eventually(t, 10*time.Second, fmt.Sprintf("%d shards, replayed", n), func() bool {
		shards := p.Snapshot()
		return len(shards) == n && !slices.ContainsFunc(shards, (*route.Shard).NeedsReplay)
	})
}
