package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
)

// buildShardctl builds the binary once per test into a temporary folder.
func buildShardctl(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shardctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/shardctl").CombinedOutput(); err != nil {
		t.Fatalf("build shardctl: %v\n%s", err, out)
	}
	return bin
}

// process is a shardctl runtime started as a process for one test.
type process struct {
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	log  strings.Builder
}

// startRuntime runs `shardctl ARGS`, waits for its "listening on" line and
// stops it (SIGTERM, then SIGKILL) when the test ends.
func startRuntime(t testing.TB, bin string, args ...string) *process {
	t.Helper()
	r := &process{cmd: exec.Command(bin, args...)}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = r.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = r.cmd.Process.Kill()
			<-done
		}
	})
	lines := bufio.NewScanner(stderr)
	first := make(chan string, 1)
	go func() {
		for lines.Scan() {
			line := lines.Text()
			if after, ok := strings.CutPrefix(line, "listening on "); ok {
				select {
				case first <- after:
				default:
				}
			}
			r.mu.Lock()
			r.log.WriteString(line + "\n")
			r.mu.Unlock()
		}
	}()
	select {
	case r.addr = <-first:
	case <-time.After(20 * time.Second):
		t.Fatalf("shardctl %v printed no listening line", args)
	}
	return r
}

func (r *process) stderr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

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
	bin := buildShardctl(t)
	reg := startRuntime(t, bin, "registry", "serve", "--listen", "127.0.0.1:0", "--eviction-interval", "1s")
	regURL := "http://" + reg.addr + "/eureka"
	startSim := func(id string) *process {
		return startRuntime(t, bin, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
			"--register", regURL, "--shard-id", id, "--pool", "blue", "--renewal-interval", "1s", "--lease-duration", "3s")
	}
	for _, id := range []string{"sim-a", "sim-b", "sim-c"} {
		startSim(id)
	}
	adminPort := freePort(t)
	px := startRuntime(t, bin, "--registry", regURL, "proxy", "serve", "--listen", "127.0.0.1:0", "--admin", fmt.Sprintf("127.0.0.1:%d", adminPort))
	admin := fmt.Sprintf("http://127.0.0.1:%d/shards", adminPort)
	proxyShards := func() map[string]ShardStatus {
		var list struct{ Shards []ShardStatus }
		getJSON(t, admin, &list)
		out := map[string]ShardStatus{}
		for _, s := range list.Shards {
			out[s.ID] = s
		}
		return out
	}
	eventually(t, 10*time.Second*raceSlowdown, "the proxy to follow three registered shards", func() bool {
		return len(proxyShards()) == 3
	})
	slotOf := map[string]int{}
	for id, s := range proxyShards() {
		slotOf[id] = s.Slot
	}

	client := newClient(t, px.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := client.NewDeployResourceCommand().AddResource(linearProcess("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatalf("deploy through the proxy: %v", err)
	}
	var ledger struct {
		Deployments []struct{ Seq int } `json:"deployments"`
	}
	getJSON(t, "http://"+reg.addr+"/shardctl/v1/ledger", &ledger)
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
			slot, _ := splitKey(resp.GetProcessInstanceKey())
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
	eventually(t, time.Second*raceSlowdown, "the proxy to see sim-b DRAINING", func() bool {
		return proxyShards()["sim-b"].State == Draining
	})
	t.Logf("the proxy saw DRAINING %v after `shards drain` returned", time.Since(drained).Round(time.Millisecond))
	if d := time.Until(drained.Add(time.Second)); d > 0 {
		time.Sleep(d)
	}
	after := create(60)
	if after[slotOf["sim-b"]] != 0 {
		t.Errorf("%d new instances went to sim-b more than 1 s after it was drained: %v", after[slotOf["sim-b"]], after)
	}

	// The drained shard's jobs still complete.
	var mu sync.Mutex
	completed := map[int]int{}
	w := client.NewJobWorker().JobType("work").Handler(func(c worker.JobClient, job entities.Job) {
		if _, err := c.NewCompleteJobCommand().JobKey(job.GetKey()).Send(ctx); err == nil {
			slot, _ := splitKey(job.GetProcessInstanceKey())
			mu.Lock()
			completed[slot]++
			mu.Unlock()
		}
	}).MaxJobsActive(32).PollInterval(50 * time.Millisecond).Open()
	defer w.Close()
	eventually(t, 20*time.Second*raceSlowdown, "every job to complete", func() bool {
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

	// A shard that joins later is replayed the ledger before it takes
	// instances: creating by process id works there at once.
	startSim("sim-d")
	eventually(t, 10*time.Second*raceSlowdown, "the proxy to follow sim-d", func() bool {
		return proxyShards()["sim-d"].State == Up
	})
	slotD := proxyShards()["sim-d"].Slot
	if n := create(60)[slotD]; n == 0 {
		t.Errorf("no instance went to sim-d after it joined")
	}

	undrain := exec.Command(bin, "--registry", regURL, "shards", "undrain", "sim-b")
	if out, err := undrain.CombinedOutput(); err != nil {
		t.Fatalf("shards undrain: %v\n%s", err, out)
	}
	eventually(t, time.Second*raceSlowdown, "the proxy to see sim-b UP again", func() bool {
		return proxyShards()["sim-b"].State == Up
	})
	if t.Failed() {
		t.Logf("proxy stderr:\n%s", px.stderr())
	}
}
