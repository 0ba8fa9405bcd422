package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A shard killed is logged DOWN once, however many checks fail; back on
// its address, the ledger replay and its return are logged, in order.
func TestLogsShardDownAndBack(t *testing.T) {
	log, lines := logstest.New()
	shards := simtest.StartN(t, 2, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), Logger: log,
		Health: route.HealthConfig{Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond}})
	for i, s := range shards {
		lines.Wait(t, time.Second, "shard added", "shard", fmt.Sprintf("shard-%d", i+1), "slot", i+1,
			"address", s.Addr().String(), "state", proxyapi.Up, "partitions", 1, "level", "INFO")
	}
	ctx := budget.Context(t, time.Minute)
	c := newClient(t, p.Addr().String())
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	addr := shards[1].Addr().String()
	if err := shards[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	down := lines.Wait(t, 10*time.Second, "shard down", "shard", "shard-2", "slot", 2, "from", proxyapi.Up, "to", proxyapi.Down, "level", "WARN")
	if down["reason"] == "" {
		t.Errorf("the DOWN line gives no reason: %v", down)
	}
	// Checks go on failing while it is DOWN: no line more.
	failures := func() float64 {
		return proxyMetric(t, p, "shardctl_proxy_health_checks_total", "shard", "shard-2", "result", "failure")
	}
	failed := failures()
	budget.Eventually(t, 10*time.Second, "three more failed checks", func() bool { return failures() >= failed+3 })
	simtest.Start(t, sim.Config{Partitions: 1, Listen: addr})
	lines.Wait(t, 10*time.Second, "shard up", "shard", "shard-2", "slot", 2, "from", proxyapi.Down, "to", proxyapi.Up, "level", "INFO")

	var order []string
	for _, l := range lines.All(t) {
		if l["shard"] == "shard-2" {
			order = append(order, fmt.Sprint(l["msg"]))
		}
	}
	want := []string{"shard added", "shard down", "ledger replay started", "ledger replay finished", "shard up"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Errorf("shard-2's lines %q, want %q", order, want)
	}
	if l := lines.Find(t, "ledger replay finished", "shard", "shard-2"); len(l) != 1 || l[0]["deployments"] != 1.0 || l[0]["took"] == nil {
		t.Errorf("replay lines %v: want one, of 1 deployment, with how long it took", l)
	}
}

// The proxy follows an in-process registry: what an operator changes
// there (drain, pool, a cutover's weights, a shard leaving) is one line
// each in the proxy's log; a registry that goes away and comes back is a
// broken watch, then a reconnected one.
func TestLogsFollowTheRegistry(t *testing.T) {
	srv := startRegistry(t, "127.0.0.1:0")
	regAddr := srv.Addr().String()
	client, err := registryclient.New("http://"+regAddr+"/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	const app = registryapi.DefaultShardsApp
	sims := simtest.StartN(t, 2, sim.Config{Partitions: 1})
	for i, id := range []string{"blue-1", "blue-2"} {
		in, err := registryapi.NewShardInstance(registryapi.ShardRegistration{App: app, ID: id, Address: sims[i].Addr().String(), Pool: "blue"})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Registry().Register(app, in); err != nil {
			t.Fatal(err)
		}
	}
	log, lines := logstest.New()
	startProxy(t, Config{Registry: client, Logger: log, Health: route.HealthConfig{Interval: -1}})
	lines.Wait(t, time.Second, "following the registry", "registry", "http://"+regAddr+"/eureka", "app", app)
	lines.Wait(t, 10*time.Second, "shard added", "shard", "blue-1", "pool", "blue", "state", proxyapi.Up)
	lines.Wait(t, 10*time.Second, "shard added", "shard", "blue-2", "pool", "blue", "state", proxyapi.Up)
	lines.Wait(t, 5*time.Second, "proxy registered", "app", registryapi.ProxiesApp)

	r := srv.Registry()
	for _, step := range []struct {
		name   string
		change func() error
		msg    string
		fields []any
	}{
		{"drain", func() error { return r.SetState(app, "blue-1", registryapi.StateDraining) },
			"shard state changed", []any{"shard", "blue-1", "from", proxyapi.Up, "to", proxyapi.Draining}},
		{"undrain", func() error { return r.SetState(app, "blue-1", registryapi.StateUp) },
			"shard state changed", []any{"shard", "blue-1", "from", proxyapi.Draining, "to", proxyapi.Up}},
		{"out of service", func() error { return r.SetState(app, "blue-2", registryapi.StateOutOfService) },
			"shard state changed", []any{"shard", "blue-2", "from", proxyapi.Up, "to", proxyapi.OutOfService}},
		{"pool", func() error { return r.SetMetadata(app, "blue-2", map[string]string{registryapi.MetaPool: "green"}) },
			"shard pool changed", []any{"shard", "blue-2", "from", "blue", "to", "green"}},
		{"cutover weights", func() error {
			_, err := r.PutCutover(registryapi.Cutover{Name: "blue-to-green", App: app, From: "blue", To: "green",
				Weights: map[string]int{"blue": 90, "green": 10}, Phase: registryapi.PhaseProgressing})
			return err
		}, "pool weights changed", []any{"from", "none", "to", "blue=90 green=10"}},
		{"leave", func() error { return r.Cancel(app, "blue-2") },
			"shard left the registry", []any{"shard", "blue-2", "from", proxyapi.OutOfService, "to", proxyapi.Down}},
	} {
		if err := step.change(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		lines.Wait(t, 5*time.Second, step.msg, step.fields...)
	}
	// The cutover record written again with the same weights: no line.
	c, err := r.Cutover("blue-to-green")
	if err != nil {
		t.Fatal(err)
	}
	c.Step = 1
	if _, err := r.PutCutover(c); err != nil {
		t.Fatal(err)
	}

	// The registry goes, and comes back (empty) on its address.
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines.Wait(t, 5*time.Second, "registry watch broken, reconnecting", "level", "WARN")
	startRegistry(t, regAddr)
	lines.Wait(t, 10*time.Second, "registry watch reconnected", "level", "INFO")
	lines.Wait(t, 5*time.Second, "shard left the registry", "shard", "blue-1", "from", proxyapi.Up, "to", proxyapi.Down)
	// The record written again changed nothing; the registry that came
	// back has no cutover: no weights.
	if got := lines.Find(t, "pool weights changed"); len(got) != 2 || !got[1].Has("from", "blue=90 green=10", "to", "none") {
		t.Errorf("pool weights changed: %v, want once to blue=90 green=10 and once back to none\n%s", got, lines)
	}
}

// startRegistry runs an in-process registry with the memory store on
// listen until the test ends.
func startRegistry(t *testing.T, listen string) *registry.Server {
	t.Helper()
	srv, err := registry.New(registry.Config{Listen: listen, Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return srv
}
