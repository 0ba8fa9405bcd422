package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}

// TestShardsFromTheRegistry runs the federation as an operator would:
// simulators register themselves, the proxy follows the registry, and
// `shardctl shards drain` takes a shard out of placement while its jobs
// still complete; a shard that joins later is replayed the ledger the
// registry keeps.
func TestShardsFromTheRegistry(t *testing.T) {
	bin := proctest.Build(t)
	reg := proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0", "--eviction-interval", "1s")
	regURL := "http://" + reg.Addr + "/eureka"
	startSim := func(id string) *proctest.Process {
		return proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0",
			"--register", regURL, "--shard-id", id, "--pool", "blue", "--renewal-interval", "1s", "--lease-duration", "3s")
	}
	for _, id := range []string{"sim-a", "sim-b", "sim-c"} {
		startSim(id)
	}
	adminPort := proctest.FreePort(t)
	// No endpoints follow the proxy's readiness here: it stops at once.
	px := proctest.Start(t, bin, nil, "--registry", regURL, "proxy", "serve", "--listen", "127.0.0.1:0", "--admin", fmt.Sprintf("127.0.0.1:%d", adminPort),
		"--shutdown-delay", "0", "--rest-listen", "127.0.0.1:0")
	admin := fmt.Sprintf("http://127.0.0.1:%d/shards", adminPort)
	proxyShards := func() map[string]proxyapi.ShardStatus {
		var list struct{ Shards []proxyapi.ShardStatus }
		getJSON(t, admin, &list)
		out := map[string]proxyapi.ShardStatus{}
		for _, s := range list.Shards {
			out[s.ID] = s
		}
		return out
	}
	budget.Eventually(t, 10*time.Second, "the proxy to follow three registered shards", func() bool {
		return len(proxyShards()) == 3
	})
	slotOf := map[string]int{}
	for id, s := range proxyShards() {
		slotOf[id] = s.Slot
	}

	client := newClient(t, px.Addr)
	ctx := budget.Context(t, 60*time.Second)
	if _, err := client.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatalf("deploy through the proxy: %v", err)
	}
	var ledger struct {
		Deployments []struct{ Seq int } `json:"deployments"`
	}
	getJSON(t, "http://"+reg.Addr+"/shardctl/v1/ledger", &ledger)
	if len(ledger.Deployments) != 1 {
		t.Fatalf("the registry's ledger holds %d deployments, want 1", len(ledger.Deployments))
	}

	create := func(n int) map[int]int {
		perSlot := map[int]int{}
		for range n {
			resp, err := client.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx)
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			slot, _ := keyslot.Split(resp.GetProcessInstanceKey())
			perSlot[slot]++
		}
		return perSlot
	}
	before := create(60)
	if before[slotOf["sim-b"]] == 0 {
		t.Fatalf("no instance went to sim-b before the drain: %v", before)
	}

	drain := exec.Command(bin, "--registry", regURL, "shards", "drain", "sim-b")
	if out, err := drain.CombinedOutput(); err != nil {
		t.Fatalf("shards drain: %v\n%s", err, out)
	}
	drained := time.Now()
	budget.Eventually(t, time.Second, "the proxy to see sim-b DRAINING", func() bool {
		return proxyShards()["sim-b"].State == proxyapi.Draining
	})
	t.Logf("the proxy saw DRAINING %v after `shards drain` returned", time.Since(drained).Round(time.Millisecond))
	after := create(60)
	if after[slotOf["sim-b"]] != 0 {
		t.Errorf("%d new instances went to sim-b after the proxy showed it DRAINING: %v", after[slotOf["sim-b"]], after)
	}

	// The drained shard's jobs still complete.
	var mu sync.Mutex
	completed := map[int]int{}
	simtest.Worker(t, client, client.NewJobWorker().JobType("work").Handler(func(c worker.JobClient, job entities.Job) {
		if _, err := c.NewCompleteJobCommand().JobKey(job.GetKey()).Send(ctx); err == nil {
			slot, _ := keyslot.Split(job.GetProcessInstanceKey())
			mu.Lock()
			completed[slot]++
			mu.Unlock()
		}
	}).MaxJobsActive(32).PollInterval(50*time.Millisecond).RequestTimeout(time.Second).BackoffSupplier(load.Backoff()))
	budget.Eventually(t, 20*time.Second, "every job to complete", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range completed {
			n += c
		}
		return n == 120
	})
	if completed[slotOf["sim-b"]] != before[slotOf["sim-b"]] {
		t.Errorf("sim-b completed %d jobs, want the %d it held", completed[slotOf["sim-b"]], before[slotOf["sim-b"]])
	}
	// The simulators registered their REST APIs: a search through the
	// proxy sees every instance, the drained shard's too.
	base := "http://" + restAddr(t, px)
	budget.Eventually(t, 10*time.Second, "a search to see the 120 instances completed", func() bool {
		r := postSearch(t, base, "process-instances", `{"filter":{"state":"COMPLETED"},"page":{"limit":0}}`)
		return r.status == http.StatusOK && r.Page.TotalItems == 120
	})
	r := postSearch(t, base, "jobs", `{"filter":{"state":"COMPLETED"},"page":{"limit":200}}`)
	perSlot := map[int]int{}
	for _, it := range r.Items {
		k, _ := strconv.ParseInt(it["processInstanceKey"].(string), 10, 64)
		slot, _ := keyslot.Split(k)
		perSlot[slot]++
	}
	for id, slot := range slotOf {
		if perSlot[slot] != completed[slot] {
			t.Errorf("the search found %d completed jobs of %s, want %d", perSlot[slot], id, completed[slot])
		}
	}

	// A shard that joins later is replayed the ledger before it takes
	// instances: creating by process id works there at once.
	startSim("sim-d")
	budget.Eventually(t, 10*time.Second, "the proxy to follow sim-d", func() bool {
		return proxyShards()["sim-d"].State == proxyapi.Up
	})
	slotD := proxyShards()["sim-d"].Slot
	if n := create(60)[slotD]; n == 0 {
		t.Errorf("no instance went to sim-d after it joined")
	}

	undrain := exec.Command(bin, "--registry", regURL, "shards", "undrain", "sim-b")
	if out, err := undrain.CombinedOutput(); err != nil {
		t.Fatalf("shards undrain: %v\n%s", err, out)
	}
	budget.Eventually(t, time.Second, "the proxy to see sim-b UP again", func() bool {
		return proxyShards()["sim-b"].State == proxyapi.Up
	})
	if t.Failed() {
		t.Logf("proxy stderr:\n%s", px.Stderr())
	}
}
