package registry

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/registry/store"
)

func testCutover(name string) registryapi.Cutover {
	return registryapi.Cutover{Name: name, App: "zeebe-shards", From: "blue", To: "green", Phase: registryapi.PhasePending, Weights: map[string]int{"blue": 100, "green": 0}}
}

// Writes compare and swap on the version; a lease keeps everyone else
// out until it ends or is released; one cutover per app at a time.
func TestCutoverRecord(t *testing.T) {
	r, clock := newTestRegistry(t, Options{})
	c, err := r.PutCutover(testCutover("blue-to-green"))
	if err != nil || c.Version != 1 || c.App != "ZEEBE-SHARDS" {
		t.Fatalf("create: %+v, %v", c, err)
	}
	if _, err := r.PutCutover(testCutover("blue-to-green")); !errors.Is(err, registryapi.ErrConflict) {
		t.Errorf("creating it again while in progress: %v, want a conflict", err)
	}
	if _, err := r.PutCutover(testCutover("other")); !errors.Is(err, registryapi.ErrConflict) || !strings.Contains(err.Error(), "one at a time") {
		t.Errorf("a second cutover of the app: %v, want a conflict", err)
	}

	stale := c
	c.Phase, c.Step, c.Weights = registryapi.PhaseProgressing, 1, map[string]int{"blue": 90, "green": 10}
	if c, err = r.PutCutover(c); err != nil || c.Version != 2 {
		t.Fatalf("update: %+v, %v", c, err)
	}
	if _, err := r.PutCutover(stale); !errors.Is(err, registryapi.ErrConflict) || !strings.Contains(err.Error(), "read it again") {
		t.Errorf("a write from version 1 after version 2: %v", err)
	}

	held, err := r.LeaseCutover("blue-to-green", "apply-1", 15*time.Second, "")
	if err != nil || held.Holder != "apply-1" || held.LeaseExpires == nil {
		t.Fatalf("lease: %+v, %v", held, err)
	}
	var le *registryapi.LeaseError
	if _, err := r.LeaseCutover("blue-to-green", "apply-2", 15*time.Second, ""); !errors.As(err, &le) || le.Holder != "apply-1" || !errors.Is(err, registryapi.ErrLeased) {
		t.Errorf("a second lease: %v, want apply-1 named", err)
	}
	other := held
	other.Holder, other.Step = "apply-2", 2
	if _, err := r.PutCutover(other); !errors.As(err, &le) {
		t.Errorf("a write by apply-2 while apply-1 holds it: %v", err)
	}
	mine := held
	mine.Holder, mine.Step = "apply-1", 2
	if got, err := r.PutCutover(mine); err != nil || got.Step != 2 || got.Holder != "apply-1" {
		t.Errorf("the holder's write: %+v, %v", got, err)
	}
	// The holder named as gone is replaced.
	if got, err := r.LeaseCutover("blue-to-green", "apply-3", 15*time.Second, "apply-1"); err != nil || got.Holder != "apply-3" {
		t.Errorf("replacing apply-1: %+v, %v", got, err)
	}
	if _, err := r.LeaseCutover("blue-to-green", "apply-4", 15*time.Second, "apply-1"); !errors.As(err, &le) {
		t.Errorf("replacing apply-1 when apply-3 holds it: %v", err)
	}
	// A lease that ran out is anyone's.
	clock.advance(16 * time.Second)
	if got, err := r.LeaseCutover("blue-to-green", "apply-2", 15*time.Second, ""); err != nil || got.Holder != "apply-2" {
		t.Errorf("taking an expired lease: %+v, %v", got, err)
	}
	if err := r.ReleaseCutover("blue-to-green", "apply-1"); err != nil {
		t.Errorf("releasing a lease one does not hold: %v", err)
	}
	if got, _ := r.Cutover("blue-to-green"); got.Holder != "apply-2" {
		t.Errorf("apply-1 released apply-2's lease: %+v", got)
	}
	if err := r.ReleaseCutover("blue-to-green", "apply-2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Cutover("blue-to-green"); got.Holder != "" {
		t.Errorf("after its release: held by %q", got.Holder)
	}
	// Final: the app may start another.
	done, _ := r.Cutover("blue-to-green")
	done.Phase = registryapi.PhaseDone
	if _, err := r.PutCutover(done); err != nil {
		t.Fatal(err)
	}
	back := testCutover("green-to-blue")
	back.From, back.To = "green", "blue"
	if _, err := r.PutCutover(back); err != nil {
		t.Errorf("a new cutover after the first is done: %v", err)
	}
	if got := r.Cutovers("zeebe-shards"); len(got) != 2 || got[0].Name != "blue-to-green" {
		t.Errorf("Cutovers: %+v", got)
	}
	for _, bad := range []registryapi.Cutover{{Name: "x", App: "A", From: "blue", To: "blue"}, {Name: "", App: "A", From: "a", To: "b"},
		{Name: "y", App: "A", From: "a", To: "b", Weights: map[string]int{"a": 120}}} {
		if _, err := r.PutCutover(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// Records survive a restart on bolt, lease included; watchers of the
// app get every write.
func TestCutoverStoredAndWatched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	s, base := startServer(t, Config{Store: "bolt:" + path})
	c, err := registryclient.New(base+"/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got := make(chan []registryapi.Cutover, 16)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go c.Watch(wctx, "zeebe-shards", registryclient.Watcher{Cutovers: func(cs []registryapi.Cutover) { got <- cs }})
	if first := <-got; len(first) != 0 {
		t.Errorf("first delivery %+v, want no cutover yet", first)
	}

	cut, err := c.PutCutover(ctx, testCutover("blue-to-green"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.LeaseCutover(ctx, cut.Name, "apply-1", time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	var last []registryapi.Cutover
	for len(last) == 0 || last[0].Holder != "apply-1" {
		select {
		case last = <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("the watch did not carry the lease: %+v", last)
		}
	}
	if _, err := c.LeaseCutover(ctx, cut.Name, "apply-2", time.Minute, ""); !errors.Is(err, registryapi.ErrLeased) || !strings.Contains(err.Error(), "held by apply-1") {
		t.Errorf("a second lease over HTTP: %v", err)
	}
	if _, err := c.Cutover(ctx, "nope"); !registryclient.IsNotFound(err) {
		t.Errorf("an unknown cutover: %v", err)
	}
	stop()

	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st2, err := store.OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := NewRegistry(Options{Store: st2})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	back, err := r2.Cutover("blue-to-green")
	if err != nil || back.Holder != "apply-1" || back.Weights["blue"] != 100 || back.Version != cut.Version+1 {
		t.Errorf("after a restart: %+v, %v", back, err)
	}
}
