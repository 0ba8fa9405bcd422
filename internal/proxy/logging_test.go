package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
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
	shards := startShards(t, 2, sim.Config{Partitions: 1})
	p := startProxy(t, Config{Shards: shardConfigs(shards), Logger: log,
		Health: HealthConfig{Interval: 200 * time.Millisecond, Timeout: 100 * time.Millisecond}})
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
		return testutil.ToFloat64(p.metrics.checks.WithLabelValues("shard-2", "failure"))
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
	sims := startShards(t, 2, sim.Config{Partitions: 1})
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
	startProxy(t, Config{Registry: client, Logger: log, Health: HealthConfig{Interval: -1}})
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

// Ejection and its end, the admission decisions, and the lines that
// repeat under load (cooling off, the in-flight limit, overload), on
// shards without connections.
func TestLogsPlacementDecisions(t *testing.T) {
	log, lines := logstest.New()
	p, err := New(Config{Dynamic: true, Logger: log, MaxBacklog: 100, MaxInflightPerShard: 8, OverloadLimit: 4, OverloadExcess: 50,
		Health: HealthConfig{Interval: -1, OutlierFailures: 2, EjectionTime: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	p.cfg.Health.Interval = time.Hour // on, but no loop runs
	a, b := fakeShard("a", 1, ""), fakeShard("b", 2, "")
	a.Metrics = "http://127.0.0.1:1/metrics"
	p.set.Store(build([]*shard{a, b}, "", nil))
	t.Cleanup(func() {
		p.set.Store(emptySet) // fake shards have no connection to close
		_ = p.Close(context.Background())
	})

	// Ejected after two failures, returned once its time is up.
	unavailable := status.Error(codes.Unavailable, "io exception")
	p.noteFailure(false, a, unavailable)
	p.noteFailure(false, a, unavailable)
	lines.Wait(t, time.Second, "shard ejected from placement", "shard", "a", "slot", 1, "for", "1m0s", "ejections", 1, "level", "WARN")
	p.noteReturned(a, time.Now())
	if n := len(lines.Find(t, "shard returned to placement")); n != 0 {
		t.Fatalf("returned while still ejected")
	}
	p.noteReturned(a, time.Now().Add(2*time.Minute))
	p.noteReturned(a, time.Now().Add(3*time.Minute))
	if n := len(lines.Find(t, "shard returned to placement", "shard", "a")); n != 1 {
		t.Errorf("%d lines of a returning, want 1", n)
	}

	// Admission by backlog: refusing over the max, admitting under half.
	at := time.Now()
	for i, lag := range []float64{10, 150, 80, 40} {
		p.admit(a, backlog.Backlog{At: at.Add(time.Duration(i) * time.Second), Lag: lag})
	}
	lines.Wait(t, time.Second, "shard refusing new instances", "shard", "a", "reason", "backlog", "records", 150, "maxBacklog", 100)
	lines.Wait(t, time.Second, "shard admitting new instances", "shard", "a", "reason", "backlog", "records", 40)
	// By the instance limit: a reading after a refusal, then one after none.
	a.admission.instances.limited.Store(true)
	p.admit(a, backlog.Backlog{At: at.Add(5 * time.Second), Lag: 20, InFlight: 70})
	p.admit(a, backlog.Backlog{At: at.Add(6 * time.Second), Lag: 20, InFlight: 30})
	lines.Wait(t, time.Second, "shard refusing new instances", "shard", "a", "reason", "instance limit", "instances", 70, "instanceLimit", 64)
	lines.Wait(t, time.Second, "shard admitting new instances", "shard", "a", "reason", "instance limit", "instances", 30)
	if n := len(lines.Find(t, "shard refusing new instances", "shard", "a")); n != 2 {
		t.Errorf("%d refusing lines, want one per decision (2)", n)
	}

	// A hundred RESOURCE_EXHAUSTED answers: one line, then a count.
	exhausted := status.Error(codes.ResourceExhausted, "partition 1 backpressure")
	for range 100 {
		p.coolOff(b, exhausted)
	}
	// The in-flight limit refuses the 9th call and those after; the 7th
	// overloads the shard, and it is back under 4.
	for i := range 10 {
		if err := p.enter(b, "CreateProcessInstance"); err != nil && i < 8 {
			t.Fatalf("call %d refused: %v", i+1, err)
		}
	}
	for range 8 {
		p.leave(b, "CreateProcessInstance", nil, false)
	}
	if got := lines.Find(t, "shard cooling off, refusing new instances", "shard", "b"); len(got) != 1 ||
		got[0]["reason"] != "partition 1 backpressure" || got[0]["for"] != "30s" {
		t.Errorf("cooling off lines %v, want one, with the reason and the time", got)
	}
	lines.Wait(t, time.Second, "shard overloaded, refusing new instances", "shard", "b", "inFlight", 7, "overloadAt", 6)
	lines.Wait(t, time.Second, "shard refusing calls at its in-flight limit", "shard", "b", "limit", 8)
	// What was left out is counted when the proxy stops (or an interval
	// later): the latest overload line is the state it is in.
	p.repeats.FlushAll()
	lines.Wait(t, time.Second, "shard cooling off, refusing new instances", "shard", "b", "suppressed", 99)
	lines.Wait(t, time.Second, "shard refusing calls at its in-flight limit", "shard", "b", "suppressed", 1)
	lines.Wait(t, time.Second, "shard no longer overloaded, admitting new instances", "shard", "b", "suppressed", 1, "inFlight", 3)
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
