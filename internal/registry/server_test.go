package registry

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/registry/replica"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// The runtime owns what it starts: a listener that fails under it is
// reported by Failed and logged, and Close waits and answers the same
// twice.
func TestServerReportsServeErrorAndClosesTwice(t *testing.T) {
	log, lines := logstest.New()
	s, err := New(Config{Listen: "127.0.0.1:0", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.ln.Close() // the listener fails under the server
	select {
	case err := <-s.Failed():
		if !strings.Contains(err.Error(), "serve on "+s.Addr().String()) {
			t.Fatalf("Failed: %v", err)
		}
	case <-time.After(budget.Of(5 * time.Second)):
		t.Fatal("a listener that failed was not reported")
	}
	lines.Wait(t, time.Second, "registry failed", "level", "ERROR")
	ctx := budget.Context(t, 10*time.Second)
	first, second := s.Close(ctx), s.Close(ctx)
	if first != second {
		t.Fatalf("Close: %v, then %v", first, second)
	}
}

// An embedded etcd member's warnings reach the registry's log, and none
// of its info lines: here its peer (another replica's process) stops,
// which etcd warns about, and comes back, so that the member has its
// quorum to stop with.
func TestEmbeddedEtcdWarnsInTheRegistryLog(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two etcd members")
	}
	t.Parallel()
	bin := proctest.Build(t)
	cluster := initialCluster(t, []string{"a", "b"})
	peerArgs := []string{"registry", "serve", "--listen", "127.0.0.1:0", "--id", "b", "--embedded-etcd", t.TempDir(),
		"--initial-cluster", cluster, "--etcd-client-url", fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t))}
	peer := proctest.Start(t, bin, nil, peerArgs...)
	var log *slog.Logger
	log, lines := logstest.New()
	s, err := New(Config{Listen: "127.0.0.1:0", Logger: log,
		Embedded: &store.EmbeddedEtcd{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:0", InitialCluster: cluster},
		Options:  Options{Replica: replica.Options{ID: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ready := func() bool { _, ok, _ := readyz(t, "http://"+s.Addr().String()); return ok }
	budget.Eventually(t, 30*time.Second, "a ready", ready)
	peer.Stop()
	budget.Eventually(t, 20*time.Second, "a warning of the member in the registry's log", func() bool {
		for _, l := range lines.All(t) {
			if l["level"] == "WARN" && l["local-member-id"] != nil {
				t.Logf("etcd: %v", l)
				return true
			}
		}
		return false
	})
	proctest.Start(t, bin, nil, peerArgs...)
	budget.Eventually(t, 30*time.Second, "a ready again", ready)
	if err := s.Close(budget.Context(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines.All(t) {
		if l["level"] == "INFO" && l["local-member-id"] != nil {
			t.Fatalf("an info line of etcd in the registry's log: %v", l)
		}
	}
}
