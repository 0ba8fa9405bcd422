package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/linktest"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/replica"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// replicaIDs are the three replicas of the tests.
var replicaIDs = []string{"a", "b", "c"}

// initialCluster picks a peer port per member and names them all.
func initialCluster(t *testing.T, ids []string) string {
	var members []string
	for _, id := range ids {
		members = append(members, fmt.Sprintf("%s=http://127.0.0.1:%d", id, proctest.FreePort(t)))
	}
	return strings.Join(members, ",")
}

// readyz reads a replica's /readyz: its view and whether it is ready.
func readyz(t testing.TB, base string) (registryapi.ReplicaStatus, bool, string) {
	t.Helper()
	st, ready, reason, err := readyzQuiet(testClient, base)
	if err != nil {
		t.Fatal(err)
	}
	return st, ready, reason
}

// readyzQuiet is readyz for a replica that may not answer: an error for
// one that does not, or answers what /readyz does not.
func readyzQuiet(c *http.Client, base string) (registryapi.ReplicaStatus, bool, string, error) {
	code, body, err := send(c, "GET", base+"/readyz", nil, "")
	if err != nil {
		return registryapi.ReplicaStatus{}, false, "", err
	}
	var st struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"reason"`
		registryapi.ReplicaStatus
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return registryapi.ReplicaStatus{}, false, "", fmt.Errorf("%s/readyz: %d %q: %v", base, code, body, err)
	}
	if st.Ready != (code == http.StatusOK) {
		return registryapi.ReplicaStatus{}, false, "", fmt.Errorf("%s/readyz: code %d with ready=%v", base, code, st.Ready)
	}
	return st.ReplicaStatus, st.Ready, st.Reason, nil
}

// openEtcd is a client of the members at urls, closed when the test ends.
func openEtcd(t testing.TB, urls ...string) *store.Etcd {
	t.Helper()
	st, err := store.OpenEtcdStore(urls, "", store.EtcdLogin{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.(*store.Etcd)
}

// appIDs is the instance ids of an app as a replica serves them.
func appIDs(c *http.Client, base, app string) (map[string]bool, error) {
	code, body, err := send(c, "GET", base+"/eureka/apps/"+app, jsonHeader, "")
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	if code == http.StatusNotFound {
		return ids, nil
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /eureka/apps/%s: %d %s", app, code, body)
	}
	var doc struct {
		Application struct {
			Instance []struct {
				InstanceID string `json:"instanceId"`
			} `json:"instance"`
		} `json:"application"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		return nil, fmt.Errorf("GET /eureka/apps/%s: %v", app, err)
	}
	for _, in := range doc.Application.Instance {
		ids[in.InstanceID] = true
	}
	return ids, nil
}

func waitReplicasReady(t *testing.T, bases map[string]string) {
	t.Helper()
	for id, base := range bases {
		budget.Eventually(t, 30*time.Second, "replica "+id+" ready", func() bool {
			st, ready, _ := readyz(t, base)
			return ready && len(st.Members) == len(bases) && st.Coordinator != ""
		})
	}
}

// leaseJSON registers an instance with its own lease.
const leaseJSON = `{"instance":{"instanceId":"%s","hostName":"h","app":"%s","ipAddr":"10.0.0.2","status":"UP",
"port":{"$":8080,"@enabled":"true"},"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},
"leaseInfo":{"renewalIntervalInSecs":1,"durationInSecs":%d}%s}}`

func registerLease(t testing.TB, base, app, id string, lease int, meta string) (int, string) {
	t.Helper()
	if meta != "" {
		meta = `,"metadata":` + meta
	}
	return do(t, "POST", base+"/eureka/apps/"+app, jsonHeader, fmt.Sprintf(leaseJSON, id, app, lease, meta))
}

func present(t testing.TB, base, app, id string) bool {
	t.Helper()
	code, _ := do(t, "GET", base+"/eureka/apps/"+app+"/"+id, jsonHeader, "")
	return code == http.StatusOK
}

// within polls cond every 10 ms and reports how long it took to hold, or
// fails past limit.
func within(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestReplicasOverEmbeddedEtcd runs three `registry serve` processes, each
// with an etcd member, as an operator would: a change through any replica
// shows on the others within a second; two shards that ask for one slot
// through two replicas at once do not both get it; and with renewals
// spread over the replicas, SIGKILL of the coordinator hands over to the
// other preferred replica, evicts no lease wrongly, loses nothing.
func TestReplicasOverEmbeddedEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds shardctl and runs three registry processes")
	}
	t.Parallel() // waits on leases and sessions, as the tests beside it
	bin := proctest.Build(t)
	dir := t.TempDir()
	cluster := initialCluster(t, replicaIDs)
	procs, bases := map[string]*proctest.Process{}, map[string]string{}
	for _, id := range replicaIDs {
		procs[id] = proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0", "--id", id,
			"--embedded-etcd", filepath.Join(dir, id), "--initial-cluster", cluster,
			"--etcd-client-url", fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t)),
			"--coordinators", "c,b", "--session-ttl", "4s", "--eviction-interval", "250ms", "--self-preservation=false")
		bases[id] = "http://" + procs[id].Addr
	}
	waitReplicasReady(t, bases)
	// a may coordinate while it is alone; once b or c is alive it hands
	// over to one of them, and every replica sees the same one.
	budget.Eventually(t, 15*time.Second, "one of the preferred (b, c) coordinates, as every replica sees it", func() bool {
		st, _, _ := readyz(t, bases["a"])
		if st.Coordinator != "b" && st.Coordinator != "c" {
			return false
		}
		for _, id := range replicaIDs {
			if other, _, _ := readyz(t, bases[id]); other.Coordinator != st.Coordinator || other.IsCoordinator != (id == st.Coordinator) {
				return false
			}
		}
		return true
	})

	t.Run("visible everywhere within 1s", func(t *testing.T) {
		for _, w := range replicaIDs {
			id := "vis-" + w
			if code, body := registerLease(t, bases[w], "VIS", id, 600, ""); code != http.StatusNoContent {
				t.Fatalf("register through %s: %d %s", w, code, body)
			}
			for _, r := range replicaIDs {
				took := within(t, budget.Of(time.Second), fmt.Sprintf("%s registered through %s, on %s", id, w, r),
					func() bool { return present(t, bases[r], "VIS", id) })
				t.Logf("registered through %s, on %s after %v", w, r, took.Round(time.Millisecond))
			}
		}
		if code, body := do(t, "DELETE", bases["b"]+"/eureka/apps/VIS/vis-a", nil, ""); code != http.StatusOK {
			t.Fatalf("cancel through b: %d %s", code, body)
		}
		for _, r := range replicaIDs {
			within(t, budget.Of(time.Second), "cancel through b, on "+r, func() bool { return !present(t, bases[r], "VIS", "vis-a") })
		}
	})

	t.Run("one slot, two replicas", func(t *testing.T) {
		var wg sync.WaitGroup
		codes := map[string]int{}
		var mu sync.Mutex
		for _, w := range []string{"a", "b"} {
			wg.Go(func() {
				code, _ := registerLease(t, bases[w], registryapi.DefaultShardsApp, "shard-"+w, 600, `{"slot":"5"}`)
				mu.Lock()
				codes[w] = code
				mu.Unlock()
			})
		}
		wg.Wait()
		if (codes["a"] == http.StatusNoContent) == (codes["b"] == http.StatusNoContent) || codes["a"]+codes["b"] != http.StatusNoContent+http.StatusConflict {
			t.Fatalf("slot 5 asked through a and b at once: %v; want one 204 and one 409", codes)
		}
		winner := "shard-a"
		if codes["b"] == http.StatusNoContent {
			winner = "shard-b"
		}
		for _, r := range replicaIDs {
			within(t, budget.Of(time.Second), "the slot's holder on "+r, func() bool {
				shards := map[string]int{}
				code, body := do(t, "GET", bases[r]+"/shardctl/v1/shards", nil, "")
				var out struct{ Shards []registryapi.Shard }
				if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
					return false
				}
				for _, s := range out.Shards {
					shards[s.ID] = s.Slot
				}
				return len(shards) == 1 && shards[winner] == 5
			})
		}
	})

	t.Run("SIGKILL the coordinator under renewals", func(t *testing.T) {
		const n = 40
		const loadLease = 3 * time.Second
		// Renewals go only to replicas that do not coordinate: the one
		// that evicts learns of them from the others alone.
		st, _, _ := readyz(t, bases["a"])
		victim := st.Coordinator
		heir := map[string]string{"b": "c", "c": "b"}[victim]
		live := atomic.Pointer[[]string]{}
		live.Store(&[]string{"a", heir})
		for i := range n {
			w := replicaIDs[i%3]
			if code, body := registerLease(t, bases[w], "LOAD", fmt.Sprintf("l-%d", i), int(loadLease/time.Second), ""); code != http.StatusNoContent {
				t.Fatalf("register l-%d through %s: %d %s", i, w, code, body)
			}
		}
		// Every instance renews twice a second, each time through the next
		// of those replicas: its lease must hold on all of them.
		var lost, renewed atomic.Int64
		var lostWhat sync.Map
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				ids := *live.Load()
				for i := range n {
					base := bases[ids[(i+k)%len(ids)]]
					req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/eureka/apps/LOAD/l-%d", base, i), nil)
					resp, err := testClient.Do(req)
					if err != nil {
						continue // a replica being killed
					}
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						renewed.Add(1)
					case http.StatusNotFound:
						lost.Add(1)
						lostWhat.Store(fmt.Sprintf("l-%d via %s", i, base), true)
					}
				}
			}
		})
		defer func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			wg.Wait()
		}()
		// Past a lease before the kill: a coordinator that did not learn
		// of these renewals from the others would have evicted by then.
		// Leases run on the wall clock, so this wait is not stretched: a
		// slow machine renews less often in it, and checks no less.
		time.Sleep(loadLease)

		survivors := []string{"a", heir}
		live.Store(&[]string{"a"})
		procs[victim].Kill()
		killed := time.Now()
		t.Logf("killed coordinator %s; expect %s to take over", victim, heir)
		// Registered after the kill and never renewed: the new coordinator
		// must evict it. A write in flight while etcd elects a leader may
		// be refused (503), as a Eureka client would, it tries again.
		budget.Eventually(t, 15*time.Second, "register dead", func() bool {
			code, body := registerLease(t, bases["a"], "LOAD", "dead", 2, "")
			if code != http.StatusNoContent && code != http.StatusServiceUnavailable {
				t.Fatalf("register dead: %d %s", code, body)
			}
			if code != http.StatusNoContent {
				t.Logf("register dead: %d %s", code, body)
			}
			return code == http.StatusNoContent
		})
		budget.Eventually(t, 30*time.Second, heir+" coordinates", func() bool {
			a, _, _ := readyz(t, bases["a"])
			if a.IsCoordinator {
				t.Fatalf("a (not preferred) became coordinator while %s (preferred) is alive", heir)
			}
			h, ready, _ := readyz(t, bases[heir])
			return ready && h.IsCoordinator && a.Coordinator == heir
		})
		t.Logf("%s coordinates %v after the kill", heir, time.Since(killed).Round(100*time.Millisecond))
		for _, r := range survivors {
			budget.Eventually(t, 15*time.Second, "dead evicted, seen on "+r, func() bool { return !present(t, bases[r], "LOAD", "dead") })
		}
		// Renewals go on past a lease and two evictions under the heir
		// (not stretched either, as above).
		time.Sleep(loadLease + time.Second)
		close(stop)
		wg.Wait()
		if lost.Load() > 0 || renewed.Load() < n {
			var what []string
			lostWhat.Range(func(k, _ any) bool { what = append(what, k.(string)); return true })
			t.Fatalf("%d renewals answered 404 (a lease evicted while renewed: %v); %d renewed", lost.Load(), what, renewed.Load())
		}
		for _, r := range survivors {
			for i := range n {
				if !present(t, bases[r], "LOAD", fmt.Sprintf("l-%d", i)) {
					t.Fatalf("l-%d is gone on %s", i, r)
				}
			}
			for _, w := range []string{"b", "c"} { // registered through the victim too
				if !present(t, bases[r], "VIS", "vis-"+w) {
					t.Fatalf("vis-%s, acknowledged before the kill, is gone on %s", w, r)
				}
			}
		}
		t.Logf("%d renewals through the replicas, none refused", renewed.Load())
	})
}

// startMember runs a one-member etcd cluster for the test: the replicas
// of a test may all share it, and one cut off from it is cut off as well
// as one whose member stopped (see linktest). set, if given, changes the
// member's configuration first.
func startMember(t *testing.T, set ...func(*store.EmbeddedEtcd)) *store.EmbeddedMember {
	t.Helper()
	c := store.EmbeddedEtcd{Dir: t.TempDir(), Name: "m", ClientURL: "http://127.0.0.1:0", InitialCluster: initialCluster(t, []string{"m"})}
	for _, f := range set {
		f(&c)
	}
	m, err := store.StartEmbeddedEtcd(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// TestReplicaCutOffFromEtcd cuts the coordinator off from etcd (a
// member of several that stops is the same to it, and is
// TestReplicasOverEmbeddedEtcd's kill): the coordinator reports not ready, refuses writes, answers
// reads from its last view with the staleness header, and evicts nothing,
// while the other replicas elect another coordinator, which evicts what
// expired.
func TestReplicaCutOffFromEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd member")
	}
	t.Parallel() // waits on leases and sessions
	m := startMember(t)
	// a reaches the member through a link, to be cut: a partition. (Stopping
	// an etcd member is no such cut: its Close refuses new requests, but
	// lets the streams open on it, a replica's watch and session among
	// them, go on for its request timeout, 7 s.)
	cutA := linktest.Start(t, strings.TrimPrefix(m.ClientURL, "http://"))
	urls := map[string]string{"a": "http://" + cutA.Addr(), "b": m.ClientURL, "c": m.ClientURL}
	servers, bases, lines := map[string]*Server{}, map[string]string{}, map[string]*logstest.Lines{}
	for _, id := range replicaIDs {
		var log *slog.Logger
		log, lines[id] = logstest.New()
		servers[id], bases[id] = startServer(t, Config{Store: "etcd:" + urls[id], Logger: log, Options: Options{
			EvictionInterval: 200 * time.Millisecond,
			Replica:          replica.Options{ID: id, Coordinators: []string{"a"}, SessionTTL: 2 * time.Second, Cutoff: time.Second},
		}})
	}
	waitReplicasReady(t, bases)
	budget.Eventually(t, 15*time.Second, "a coordinates", func() bool { st, _, _ := readyz(t, bases["a"]); return st.IsCoordinator })
	lines["a"].Wait(t, time.Second, "replica became coordinator: it evicts", "replica", "a")

	// Renewed through b until a is cut off, then left to expire.
	if code, body := registerLease(t, bases["b"], "CUT", "x", 2, ""); code != http.StatusNoContent {
		t.Fatalf("register: %d %s", code, body)
	}
	within(t, budget.Of(time.Second), "x on a", func() bool { return present(t, bases["a"], "CUT", "x") })
	cutA.Cut()
	stopped := time.Now()

	budget.Eventually(t, 10*time.Second, "a not ready", func() bool { _, ready, _ := readyz(t, bases["a"]); return !ready })
	st, _, reason := readyz(t, bases["a"])
	t.Logf("a not ready %v after it was cut off: %s", time.Since(stopped).Round(100*time.Millisecond), reason)
	if !st.CutOff || !strings.Contains(reason, "cut off from etcd") {
		t.Fatalf("a: cutOff=%v reason %q", st.CutOff, reason)
	}
	// The others take over and evict x, whose lease ran out.
	budget.Eventually(t, 20*time.Second, "x evicted, seen on b and c", func() bool {
		return !present(t, bases["b"], "CUT", "x") && !present(t, bases["c"], "CUT", "x")
	})
	if b, _, _ := readyz(t, bases["b"]); b.Coordinator == "a" || b.Coordinator == "" {
		t.Fatalf("b sees coordinator %q after a was cut off", b.Coordinator)
	}
	// a still shows x, evicted nothing, and says how old its view is.
	req, _ := http.NewRequest("GET", bases["a"]+"/eureka/apps/CUT/x", nil)
	req.Header.Set("Accept", "application/json")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(registryapi.StaleHeader) == "" {
		t.Fatalf("read from a: %d, %s %q; want 200 with its last view and how stale", resp.StatusCode, registryapi.StaleHeader, resp.Header.Get(registryapi.StaleHeader))
	}
	t.Logf("a answers reads with %s: %s", registryapi.StaleHeader, resp.Header.Get(registryapi.StaleHeader))
	if n := servers["a"].Registry().Status().Evicted; n != 0 {
		t.Fatalf("a evicted %d while cut off", n)
	}
	if code, body := registerLease(t, bases["a"], "CUT", "y", 30, ""); code != http.StatusServiceUnavailable {
		t.Fatalf("write to a while cut off: %d %s; want 503", code, body)
	}
	// Their logs say so: a cut off and no longer coordinator, another
	// coordinator that evicted x.
	lines["a"].Wait(t, 5*time.Second, "replica cut off from etcd: not ready, reads stale, writes refused, no eviction", "replica", "a", "level", "WARN")
	lines["a"].Wait(t, 5*time.Second, "replica no longer coordinator", "replica", "a", "reason", "its etcd session ended")
	heir := "b"
	if b, _, _ := readyz(t, bases["b"]); b.Coordinator == "c" {
		heir = "c"
	}
	lines[heir].Wait(t, 5*time.Second, "replica became coordinator: it evicts", "replica", heir)
	lines[heir].Wait(t, 5*time.Second, "lease expired, instance evicted", "app", "CUT", "instance", "x")
}

// TestReplicaWithdrawsAStrayCandidacy: a replica that may not coordinate
// holds no key in the election. A Resign that timed out on a slow etcd
// left b's key ahead of a's, and a (the preferred) never won: here such
// a key is put under b's session, and b must take it away.
func TestReplicaWithdrawsAStrayCandidacy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an etcd member")
	}
	m := startMember(t)
	servers, bases := map[string]*Server{}, map[string]string{}
	for _, id := range []string{"a", "b"} {
		servers[id], bases[id] = startServer(t, Config{Store: "etcd:" + m.ClientURL, Options: Options{
			Replica: replica.Options{ID: id, Coordinators: []string{"a"}, SessionTTL: 2 * time.Second},
		}})
	}
	waitReplicasReady(t, bases)
	budget.Eventually(t, 15*time.Second, "a coordinates", func() bool { st, _, _ := readyz(t, bases["a"]); return st.IsCoordinator })

	// b's session is the lease of its member key; a campaign under it
	// puts the key concurrency.Election names: the prefix, the lease in hex.
	cli := openEtcd(t, m.ClientURL)
	ctx, cancel := context.WithTimeout(context.Background(), budget.Of(5*time.Second))
	defer cancel()
	resp, err := cli.Client.Get(ctx, cli.Prefix+store.KeyMembers+"b")
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("b's member key: %v, %v", resp, err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	key := fmt.Sprintf("%s%s%x", cli.Prefix, store.KeyElection, lease)
	if _, err := cli.Client.Put(ctx, key, "b", clientv3.WithLease(lease)); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 10*time.Second, "b's stray key withdrawn", func() bool {
		resp, err := cli.Client.Get(ctx, key)
		return err == nil && len(resp.Kvs) == 0
	})
	if st, _, _ := readyz(t, bases["a"]); !st.IsCoordinator || st.Coordinator != "a" {
		t.Fatalf("a: coordinator %q, isCoordinator %v; want a", st.Coordinator, st.IsCoordinator)
	}
}
