package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/linktest"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A registry that goes silent behind a half-open connection (no close,
// no keep-alive) is noticed within the watch's silence limit: the proxy
// says so in /readyz and shardctl_proxy_registry_reachable, keeps routing
// on the shard set it has, and reconnects once the registry can be
// reached again.
func TestRegistrySilenceIsNoticed(t *testing.T) {
	srv, err := registry.New(registry.Config{Listen: "127.0.0.1:0", Store: "memory", WatchKeepAlive: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	hole := linktest.Start(t, srv.Addr().String())
	client, err := registryclient.New("http://"+hole.Addr()+"/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	client.WatchSilence = budget.Of(time.Second)
	sims := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	in, err := registryapi.NewShardInstance(registryapi.ShardRegistration{App: registryapi.DefaultShardsApp, ID: "blue-1", Address: sims[0].Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Registry().Register(registryapi.DefaultShardsApp, in); err != nil {
		t.Fatal(err)
	}
	log, lines := logstest.New()
	p := startProxy(t, Config{Registry: client, Logger: log, Health: route.HealthConfig{Interval: -1}})
	shardsReady(t, p, 1)
	readyz := func() string {
		resp, err := http.Get("http://" + p.AdminAddr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/readyz %d %q: want 200", resp.StatusCode, b)
		}
		return string(b)
	}
	if got := readyz(); got != "ok\n" {
		t.Errorf("/readyz %q with the registry heard: want ok", got)
	}

	hole.Silence()
	broken := lines.Wait(t, 3*time.Second, "registry watch broken, reconnecting", "level", "WARN")
	if err, _ := broken["err"].(string); !strings.Contains(err, "nothing heard") {
		t.Errorf("the broken watch's error %q: want it to say it heard nothing", err)
	}
	if got := readyz(); !strings.HasPrefix(got, "ok\nwarning: the registry has been unreachable since ") {
		t.Errorf("/readyz %q with the registry silent: want ok with a warning", got)
	}
	if v := proxyMetric(t, p, "shardctl_proxy_registry_reachable"); v != 0 {
		t.Errorf("shardctl_proxy_registry_reachable %v with the registry silent: want 0", v)
	}
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	if _, err := gw.Topology(budget.Context(t, time.Minute), &pb.TopologyRequest{}); err != nil {
		t.Errorf("a call while the registry is silent: %v", err)
	}

	hole.Pass()
	lines.Wait(t, 20*time.Second, "registry watch reconnected", "level", "INFO")
	budget.Eventually(t, 5*time.Second, "/readyz and the gauge to say the registry is heard", func() bool {
		return readyz() == "ok\n" && proxyMetric(t, p, "shardctl_proxy_registry_reachable") == 1
	})
}
