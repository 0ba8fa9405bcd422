package registry

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/registry/replica"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// TestEvictionFencedByElectionKey: the coordinator's election key is
// deleted behind its back, as etcd does when its lease ends while it is
// paused or cut off and it has not noticed yet. Its next eviction is
// refused by etcd (the write holds only while that key exists), it steps
// down, stands again, and only as coordinator again does it evict.
func TestEvictionFencedByElectionKey(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd member")
	}
	t.Parallel()
	m := startMember(t)
	var log *slog.Logger
	log, lines := logstest.New()
	_, base := startServer(t, Config{Store: "etcd:" + m.ClientURL, Logger: log, Options: Options{
		EvictionInterval: 100 * time.Millisecond, SelfPreservation: false,
		Replica: replica.Options{ID: "a", SessionTTL: 30 * time.Second},
	}})
	waitReplicasReady(t, map[string]string{"a": base})
	lines.Wait(t, 5*time.Second, "replica became coordinator: it evicts", "replica", "a")

	cli := openEtcd(t, m.ClientURL)
	ctx, cancel := context.WithTimeout(context.Background(), budget.Of(10*time.Second))
	defer cancel()
	resp, err := cli.Client.Get(ctx, cli.Prefix+store.KeyElection, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the election keys: %v, %v; want a's alone", resp, err)
	}
	if _, err := cli.Client.Delete(ctx, string(resp.Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	// Registered after the key went, and never renewed: the first
	// eviction that finds it expired is a's write as a coordinator it no
	// longer is.
	if code, body := registerLease(t, base, "FENCE", "x", 1, ""); code != http.StatusNoContent {
		t.Fatalf("register: %d %s", code, body)
	}
	lines.Wait(t, 10*time.Second, "replica no longer coordinator", "replica", "a", "reason", "etcd refused its write as coordinator: its election key is gone")
	lines.Wait(t, 10*time.Second, "lease expired, instance evicted", "app", "FENCE", "instance", "x")
	t.Logf("a stepped down, stood again and evicted x %v after its key was deleted", time.Since(deleted).Round(10*time.Millisecond))

	// In that order: refused, coordinator again, then the eviction.
	var order []string
	for _, l := range lines.All(t) {
		switch {
		case l["msg"] == "replica no longer coordinator" && l["reason"] != nil:
			order = append(order, "stepped down")
		case l["msg"] == "replica became coordinator: it evicts":
			order = append(order, "coordinator")
		case l["msg"] == "lease expired, instance evicted" && l["instance"] == "x":
			order = append(order, "evicted x")
		}
	}
	want := []string{"coordinator", "stepped down", "coordinator", "evicted x"}
	if len(order) != len(want) {
		t.Fatalf("log order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("log order %v, want %v", order, want)
		}
	}
	if present(t, base, "FENCE", "x") {
		t.Fatal("x still present after its eviction was logged")
	}
}
