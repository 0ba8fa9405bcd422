package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/replica"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// TestReplicaGroupCommit: writes that wait together go to etcd as one
// transaction, far fewer revisions than writes; writes that touch one
// key (shards taking slots, all in slots/APP) never share a transaction
// and each still gets a slot of its own; and a replica told etcd allows
// more operations than it does learns the limit from etcd's refusal and
// loses no write.
func TestReplicaGroupCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd member")
	}
	t.Parallel()
	const memberLimit = 6
	m := startMember(t, func(c *store.EmbeddedEtcd) { c.MaxTxnOps = memberLimit })
	bases, lines := map[string]string{}, map[string]*logstest.Lines{}
	for _, id := range []string{"a", "b"} {
		var log *slog.Logger
		log, lines[id] = logstest.New()
		_, bases[id] = startServer(t, Config{Store: "etcd:" + m.ClientURL, Logger: log, Options: Options{
			Replica: replica.Options{ID: id, MaxTxnOps: 1000},
		}})
	}
	waitReplicasReady(t, bases)
	cli := openEtcd(t, m.ClientURL).Client
	revision := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, "/")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}

	const instances, shards, workers = 400, 20, 40
	before := revision()
	var wg sync.WaitGroup
	var next, failed atomic.Int64
	var firstFailure atomic.Value
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= instances+shards {
					return
				}
				var code int
				var body string
				if i < shards {
					// Every shard through one replica or the other, all in one key.
					code, body = registerLease(t, bases[[]string{"a", "b"}[i%2]], registryapi.DefaultShardsApp, fmt.Sprintf("shard-%d", i), 600, "")
				} else {
					code, body = registerLease(t, bases["a"], "GROUP", fmt.Sprintf("g-%d", i), 600, "")
				}
				if code != http.StatusNoContent {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("write %d: %d %s", i, code, body))
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d writes failed; first: %v", n, instances+shards, firstFailure.Load())
	}
	revs := revision() - before
	t.Logf("%d writes from %d clients in %d etcd revisions", instances+shards, workers, revs)
	if revs > (instances+shards)/3 {
		t.Errorf("%d writes took %d etcd revisions: want writes that wait together in one transaction", instances+shards, revs)
	}
	lines["a"].Wait(t, time.Second, "etcd refused a group of writes as too large: sending smaller groups", "replica", "a")

	for id, base := range bases {
		budget.Eventually(t, 10*time.Second, "every write on "+id, func() bool {
			ids, err := appIDs(testClient, base, "GROUP")
			return err == nil && len(ids) == instances
		})
		code, body := do(t, "GET", base+"/shardctl/v1/shards", nil, "")
		var out struct{ Shards []registryapi.Shard }
		if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
			t.Fatalf("shards on %s: %d %s", id, code, body)
		}
		slots := map[int]string{}
		for _, s := range out.Shards {
			if other, ok := slots[s.Slot]; ok || s.Slot == 0 {
				t.Fatalf("on %s: shard %s has slot %d, as %q", id, s.ID, s.Slot, other)
			}
			slots[s.Slot] = s.ID
		}
		if len(slots) != shards {
			t.Fatalf("on %s: %d shards with slots, want %d", id, len(slots), shards)
		}
	}
}
