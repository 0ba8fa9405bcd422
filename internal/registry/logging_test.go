package registry

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/logs"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// Every change an operator or a client makes is one line naming the
// shard (or instance) and what changed; a change that changes nothing
// writes nothing; another app's instances, which may come by the
// thousand, are counted rather than each written.
func TestLogsChanges(t *testing.T) {
	log, lines := logstest.New()
	r, c := newTestRegistry(t, Options{Logger: log})
	const shards = registryapi.DefaultShardsApp
	register := func(id string, duration int) {
		t.Helper()
		if err := r.Register(shards, testInstance(shards, id, 1, duration)); err != nil {
			t.Fatal(err)
		}
	}
	register("blue-1", 90)
	register("blue-1", 90)
	register("blue-2", 5)
	steps := []struct {
		name   string
		change func() error
		msg    string
		fields []any
	}{
		{"drain", func() error { return r.SetState(shards, "blue-1", registryapi.StateDraining) },
			"instance state changed", []any{"shard", "blue-1", "slot", 1, "from", registryapi.StateUp, "to", registryapi.StateDraining, "overriddenStatus", registryapi.StatusOutOfService}},
		{"undrain", func() error { return r.SetState(shards, "blue-1", registryapi.StateUp) },
			"instance state changed", []any{"shard", "blue-1", "from", registryapi.StateDraining, "to", registryapi.StateUp}},
		{"pool", func() error { return r.SetMetadata(shards, "blue-1", map[string]string{registryapi.MetaPool: "green"}) },
			"instance metadata changed", []any{"shard", "blue-1", "slot", 1}},
		{"lease expiry", func() error { c.advance(6 * time.Second); r.Evict(); return nil },
			"lease expired, instance evicted", []any{"shard", "blue-2", "slot", 2, "lease", "5s"}},
		{"cancel", func() error { return r.Cancel(shards, "blue-1") },
			"instance deregistered", []any{"shard", "blue-1", "slot", 1}},
		{"release the slot", func() error { return r.ReleaseSlot(shards, "blue-1") },
			"slot released", []any{"shard", "blue-1", "slot", 1}},
		{"deploy", func() error { _, err := r.AppendDeployment(testDeployment()); return err },
			"deployment added to the ledger", []any{"seq", 1, "resources", 1}},
		{"cutover", func() error {
			_, err := r.PutCutover(registryapi.Cutover{Name: "b2g", App: shards, From: "blue", To: "green", Weights: map[string]int{"blue": 100}, Phase: registryapi.PhasePending})
			return err
		}, "cutover created", []any{"cutover", "b2g", "phase", registryapi.PhasePending, "weights", "blue=100"}},
		{"lease", func() error { _, err := r.LeaseCutover("b2g", "apply-1", time.Minute, ""); return err },
			"cutover lease taken", []any{"cutover", "b2g", "holder", "apply-1", "replaced", ""}},
		{"step", func() error {
			cut, _ := r.Cutover("b2g")
			cut.Holder, cut.Phase, cut.Step, cut.Weights = "apply-1", registryapi.PhaseProgressing, 1, map[string]int{"blue": 90, "green": 10}
			_, err := r.PutCutover(cut)
			return err
		}, "cutover updated", []any{"cutover", "b2g", "phase", registryapi.PhaseProgressing, "previousPhase", registryapi.PhasePending, "step", 1, "weights", "blue=90 green=10"}},
		{"preempted", func() error { _, err := r.LeaseCutover("b2g", "rollback", time.Minute, "apply-1"); return err },
			"cutover lease taken", []any{"cutover", "b2g", "holder", "rollback", "replaced", "apply-1"}},
		{"released", func() error { return r.ReleaseCutover("b2g", "rollback") },
			"cutover lease released", []any{"cutover", "b2g", "holder", "rollback"}},
	}
	for _, step := range steps {
		if err := step.change(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := lines.Find(t, step.msg, step.fields...); len(got) == 0 {
			t.Errorf("%s: no line %q with %v; the log:\n%s", step.name, step.msg, step.fields, lines)
		}
	}
	if got := lines.Find(t, "instance registered", "shard", "blue-1"); len(got) != 2 || !got[0].Has("again", false, "state", registryapi.StateUp, "slot", 1) || !got[1].Has("again", true) {
		t.Errorf("blue-1 registered: %v, want two lines, the second again", got)
	}

	// Changes that change nothing: the same state, a lease renewed, the
	// record's progress alone.
	before := len(lines.All(t))
	register("blue-3", 90)
	before++
	if err := r.SetState(shards, "blue-3", registryapi.StateUp); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LeaseCutover("b2g", "apply-2", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	before++
	if _, err := r.LeaseCutover("b2g", "apply-2", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	cut, _ := r.Cutover("b2g")
	cut.Holder, cut.Status = "apply-2", []byte(`{"gates":"reading"}`)
	if _, err := r.PutCutover(cut); err != nil {
		t.Fatal(err)
	}
	if after := lines.All(t); len(after) != before {
		t.Errorf("%d lines for changes that change nothing:\n%s", len(after)-before, lines)
	}

	// Fifty instances of another app: one line, then the count.
	for i := range 50 {
		if err := r.Register("ORDERS", testInstance("ORDERS", fmt.Sprint("o", i), 30, 90)); err != nil {
			t.Fatal(err)
		}
	}
	if got := lines.Find(t, "instance registered", "app", "ORDERS"); len(got) != 1 || !got[0].Has("instance", "o0") {
		t.Errorf("ORDERS registered: %v, want the first alone", got)
	}
	c.advance(logs.RepeatEvery)
	r.repeats.Flush()
	if got := lines.Find(t, "instance registered", "app", "ORDERS"); len(got) != 2 || !got[1].Has("instance", "o49", logs.Suppressed, 49) {
		t.Errorf("ORDERS registered: %v, want the first, then the last with 49 suppressed", got)
	}
}

// Self-preservation is one line as it holds eviction and one as it lets
// go; an empty registry, which has nothing to hold, writes neither.
func TestLogsSelfPreservation(t *testing.T) {
	log, lines := logstest.New()
	r, c := newTestRegistry(t, Options{SelfPreservation: true, RenewalThreshold: 0.85, Logger: log})
	c.advance(time.Minute)
	r.Evict()
	if got := lines.Find(t, "self-preservation on: no lease expires while so few renewals arrive"); len(got) != 0 {
		t.Fatalf("an empty registry logged self-preservation: %v", got)
	}
	for i := range 10 {
		if err := r.Register("ORDERS", testInstance("ORDERS", fmt.Sprint("i", i), 30, 90)); err != nil {
			t.Fatal(err)
		}
	}
	c.advance(2 * time.Minute) // nothing renews
	r.Evict()
	r.Evict()
	on := lines.Find(t, "self-preservation on: no lease expires while so few renewals arrive", "level", "WARN")
	if len(on) != 1 || !on[0].Has("expectedPerMinute", 20, "thresholdPerMinute", 17, "renewalsLastMinute", 0) {
		t.Fatalf("self-preservation on: %v, want one line with the figures", on)
	}
	for range 3 {
		for i := range 10 {
			if err := r.Renew("ORDERS", fmt.Sprint("i", i), 0); err != nil {
				t.Fatal(err)
			}
		}
		c.advance(20 * time.Second)
	}
	r.Evict()
	off := lines.Find(t, "self-preservation off: expired leases are evicted again", "level", "INFO")
	if len(off) != 1 || !off[0].Has("renewalsLastMinute", 20) {
		t.Errorf("self-preservation off: %v, want one line with 20 renewals", off)
	}
}

// A lease left to expire on a running registry is evicted and logged
// within the eviction interval; a store that fails is logged once.
func TestLogsEvictionAndStoreFailure(t *testing.T) {
	log, lines := logstest.New()
	s, _ := startServer(t, Config{Logger: log, Options: Options{EvictionInterval: 100 * time.Millisecond}})
	in, err := registryapi.NewShardInstance(registryapi.ShardRegistration{App: registryapi.DefaultShardsApp, ID: "blue-1", Address: "127.0.0.1:26501", Pool: "blue",
		RenewalInterval: time.Second, LeaseDuration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Registry().Register(registryapi.DefaultShardsApp, in); err != nil {
		t.Fatal(err)
	}
	lines.Wait(t, 5*time.Second, "lease expired, instance evicted", "app", registryapi.DefaultShardsApp, "shard", "blue-1", "slot", 1, "lease", "1s")

	st := &slowStore{fail: errors.New("disk full")}
	log, lines = logstest.New()
	r, _ := newTestRegistry(t, Options{Store: st, Logger: log})
	for _, id := range []string{"a", "b"} {
		if err := r.Register("ORDERS", testInstance("ORDERS", id, 5, 30)); err == nil {
			t.Fatal("registered while the store fails")
		}
	}
	if got := lines.Find(t, "store write failed: the registry refuses writes until it is restarted", "level", "ERROR", "err", "disk full"); len(got) != 1 {
		t.Errorf("store failure lines %v, want one\n%s", got, lines)
	}
}
