package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/probes/load"
)

// orderProcess: reserve, charge, wait for the order's "paid" message,
// ship.
var orderProcess = []byte(load.DefinitionsHead + `<bpmn:message id="m" name="paid"><bpmn:extensionElements><zeebe:subscription correlationKey="=orderId"/></bpmn:extensionElements></bpmn:message>
<bpmn:process id="order" isExecutable="true">
<bpmn:startEvent id="start"/>
<bpmn:serviceTask id="reserve"><bpmn:extensionElements><zeebe:taskDefinition type="reserve"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:serviceTask id="charge"><bpmn:extensionElements><zeebe:taskDefinition type="charge"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:intermediateCatchEvent id="paid"><bpmn:messageEventDefinition messageRef="m"/></bpmn:intermediateCatchEvent>
<bpmn:serviceTask id="ship"><bpmn:extensionElements><zeebe:taskDefinition type="ship"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:endEvent id="end"/>
<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="reserve"/>
<bpmn:sequenceFlow id="f2" sourceRef="reserve" targetRef="charge"/>
<bpmn:sequenceFlow id="f3" sourceRef="charge" targetRef="paid"/>
<bpmn:sequenceFlow id="f4" sourceRef="paid" targetRef="ship"/>
<bpmn:sequenceFlow id="f5" sourceRef="ship" targetRef="end"/>
</bpmn:process></bpmn:definitions>`)

// federation is a registry, simulators registered in it, and a proxy
// following it, as processes.
type federation struct {
	regURL string
	env    []string // shardctl's environment: the registry
	sims   map[string]*proctest.Process
	admin  string
	proxy  *proctest.Process
}

// startSim runs a simulator registered as id in pool; extra flags after.
func (f *federation) startSim(t *testing.T, id, pool string, extra ...string) {
	t.Helper()
	args := append([]string{"sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2",
		"--timer-interval", "100ms", "--register", f.regURL, "--shard-id", id, "--pool", pool}, extra...)
	p := proctest.Start(t, bin, nil, args...)
	p.Line(t, "registered as shard ")
	f.sims[id] = p
}

func (f *federation) startProxy(t *testing.T, extra ...string) {
	t.Helper()
	f.proxy = proctest.Start(t, bin, nil, append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--registry", f.regURL}, extra...)...)
	f.admin = strings.TrimSuffix(f.proxy.Line(t, "admin on "), "/shards")
}

func newFederation(t *testing.T) *federation {
	reg := proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0", "--eviction-interval", "1s")
	f := &federation{regURL: "http://" + reg.Addr + "/eureka", sims: map[string]*proctest.Process{}}
	f.env = append(baseEnv(), "SHARDCTL_REGISTRY="+f.regURL)
	return f
}

// proxyView is the proxy's /shards.
type proxyView struct {
	Shards []struct {
		ID, State, Pool string
		Slot            int
	}
	Weights map[string]int
}

func (f *federation) view(t *testing.T) proxyView {
	t.Helper()
	resp, err := http.Get(f.admin + "/shards")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v proxyView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// workload runs orders through a client at a rate: creates, workers for
// the three tasks, and the "paid" message once an order is charged.
type workload struct {
	c       zbc.Client
	mu      sync.Mutex
	orders  map[int64]order // by instance key
	failed  []error
	shipped atomic.Int64
	done    map[int64]bool
	next    atomic.Int64
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

type order struct {
	at   time.Time
	slot int
}

func slotOf(key int64) int { return int(key >> 58 & 0x1f) }

func startWorkload(t *testing.T, c zbc.Client, rate int) *workload {
	w := &workload{c: c, orders: map[int64]order{}, done: map[int64]bool{}}
	work := func(typ string, after func(job entities.Job)) {
		jw := c.NewJobWorker().JobType(typ).Handler(func(jc worker.JobClient, job entities.Job) {
			ctx, cancel := context.WithTimeout(context.Background(), budget.Of(10*time.Second))
			defer cancel()
			if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(ctx); err != nil {
				return // the job comes back at its timeout
			}
			after(job)
		}).MaxJobsActive(64).Concurrency(4).PollInterval(20 * time.Millisecond).RequestTimeout(time.Second).Timeout(10 * time.Second).Open()
		t.Cleanup(jw.Close)
	}
	work("reserve", func(entities.Job) {})
	work("charge", func(job entities.Job) {
		vars, _ := job.GetVariablesAsMap()
		if strings.HasPrefix(fmt.Sprint(vars["orderId"]), "held-") {
			return // the test pays for these itself
		}
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(10*time.Second))
		defer cancel()
		// A short TTL: the instance reaches its catch event right after.
		_, _ = c.NewPublishMessageCommand().MessageName("paid").CorrelationKey(fmt.Sprint(vars["orderId"])).TimeToLive(5 * time.Second).Send(ctx)
	})
	work("ship", func(job entities.Job) {
		w.mu.Lock()
		if !w.done[job.ProcessInstanceKey] {
			w.done[job.ProcessInstanceKey] = true
			w.shipped.Add(1)
		}
		w.mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	w.wg.Go(func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.wg.Go(func() { w.create(ctx) })
		}
	})
	t.Cleanup(w.halt)
	return w
}

func (w *workload) create(ctx context.Context) {
	id := w.next.Add(1)
	cmd, _ := w.c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().VariablesFromMap(map[string]any{"orderId": fmt.Sprintf("o-%d", id)})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget.Of(10*time.Second))
	defer cancel()
	resp, err := cmd.Send(cctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed = append(w.failed, err)
		return
	}
	w.orders[resp.GetProcessInstanceKey()] = order{at: time.Now(), slot: slotOf(resp.GetProcessInstanceKey())}
}

// halt stops creating and waits for the creations in flight.
func (w *workload) halt() {
	w.stop()
	w.wg.Wait()
}

// greenShare is the share of orders created between from and to that
// went to the slots in green.
func (w *workload) greenShare(from, to time.Time, green map[int]bool) (float64, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, g := 0, 0
	for _, o := range w.orders {
		if o.at.After(from) && o.at.Before(to) {
			n++
			if green[o.slot] {
				g++
			}
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(g) / float64(n), n
}

// cutoverEvents reads apply's JSON lines.
type cutoverEvent struct {
	At      time.Time
	Event   string
	Step    int
	Weights map[string]int
	Message string
	Gate    *struct{ Gate, Phase string }
	Drain   *struct {
		Event, Shard string
		ETASeconds   *float64
	}
}

func cutoverEvents(t *testing.T, stdout string) []cutoverEvent {
	t.Helper()
	var out []cutoverEvent
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var e cutoverEvent
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("apply printed a line that is not JSON: %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

func writeGates(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gates.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The whole operation, as an SRE runs it: blue (the legacy cluster, with
// instances started on it before the proxy, and a second shard) under a
// steady workload through the proxy; green registered and held out;
// cutover 10/50/100 under gates; blue drains to empty. Nothing fails,
// every blue instance completes on blue (its messages too), green gets
// the weights' share of new instances at every step.
func TestCutoverEndToEnd(t *testing.T) {
	f := newFederation(t)
	f.startSim(t, "blue-1", "blue")
	// Before the proxy: the legacy cluster, used directly by clients.
	legacyAddr := f.sims["blue-1"].Addr
	legacy := simtest.Client(t, legacyAddr)
	ctx := budget.Context(t, 5*time.Minute)
	if _, err := legacy.NewDeployResourceCommand().AddResource(orderProcess, "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	var legacyKeys []int64
	for i := range 10 {
		cmd, _ := legacy.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().VariablesFromMap(map[string]any{"orderId": fmt.Sprintf("held-%d", i)})
		resp, err := cmd.Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		legacyKeys = append(legacyKeys, resp.GetProcessInstanceKey())
	}
	f.startSim(t, "blue-2", "blue")
	f.startSim(t, "green-1", "green", "--status", "OUT_OF_SERVICE")
	f.startSim(t, "green-2", "green", "--status", "OUT_OF_SERVICE")
	f.startProxy(t, "--legacy-shard", "blue-1")
	budget.Eventually(t, 20*time.Second, "the proxy to follow four shards", func() bool { return len(f.view(t).Shards) == 4 })
	green := map[int]bool{}
	for _, s := range f.view(t).Shards {
		if s.Pool == "green" {
			green[s.Slot] = true
		}
	}

	client := simtest.Client(t, f.proxy.Addr)
	if _, err := client.NewDeployResourceCommand().AddResource(orderProcess, "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	w := startWorkload(t, client, 70)
	budget.Eventually(t, 20*time.Second, "orders to ship", func() bool { return w.shipped.Load() > 50 })
	if share, n := w.greenShare(time.Time{}, time.Now(), green); share != 0 {
		t.Fatalf("green took %.0f%% of %d orders while held OUT_OF_SERVICE", share*100, n)
	}

	gates := writeGates(t, `gates:
- name: green-not-critical
  signal: level
  failureCondition: result[0] >= 2
  interval: 2s
- name: green-completes
  signal: dropShare
  successCondition: result[0] < 0.05
  interval: 2s
  noData: pass
`)
	logFile := filepath.Join(t.TempDir(), "cutover.jsonl")
	started := time.Now()
	applied := make(chan result, 1)
	go func() {
		applied <- runBinFor(t, budget.Of(4*time.Minute), bin, f.env, "", "cutover", "apply", "--from", "blue", "--to", "green", "--steps", "10,50,100",
			"--step-pause", "12s", "--gate-window", "30s", "--gates", gates, "--poll", "500ms", "--yes", "--log", logFile, "-o", "json")
	}()
	// The legacy orders wait for their payment until blue drains: the
	// drain must wait for them, and their messages reach them on blue.
	budget.Eventually(t, 3*time.Minute, "the drain of blue to begin", func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), `"event":"drain"`)
	})
	time.Sleep(2 * time.Second) // a few polls that see them in flight
	// Paid one by one, as customers do: the drain sees blue empty at a
	// rate, and says when it will be done.
	paid := time.Now()
	for i := range legacyKeys {
		if _, err := client.NewPublishMessageCommand().MessageName("paid").CorrelationKey(fmt.Sprintf("held-%d", i)).TimeToLive(time.Minute).Send(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	r := <-applied
	if r.code != 0 {
		t.Fatalf("cutover apply: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	events := cutoverEvents(t, r.stdout)
	t.Logf("cutover apply took %v, %d events", time.Since(started).Round(time.Second), len(events))

	// Each weight step: green's share of the orders created while it held.
	var weights []cutoverEvent
	var drainStart, done time.Time
	for _, e := range events {
		switch {
		case e.Event == "weights":
			weights = append(weights, e)
		case e.Event == "drain" && drainStart.IsZero():
			drainStart = e.At
		case e.Event == "done":
			done = e.At
		}
	}
	if len(weights) != 3 || done.IsZero() {
		t.Fatalf("weights events %d, done %v: %s", len(weights), done, r.stdout)
	}
	for i, e := range weights {
		end := drainStart
		if i+1 < len(weights) {
			end = weights[i+1].At
		}
		// Placements in flight when the weights changed belong to neither.
		share, n := w.greenShare(e.At.Add(500*time.Millisecond), end, green)
		want := float64(e.Weights["green"]) / 100
		t.Logf("step %d: green %d%% wanted, %.1f%% of %d orders, held %v", i+1, e.Weights["green"], share*100, n, end.Sub(e.At).Round(100*time.Millisecond))
		if share < want-0.05 || share > want+0.05 {
			t.Errorf("step %d: green got %.1f%% of %d new orders, want %d%% ± 5", i+1, share*100, n, e.Weights["green"])
		}
	}
	// The ETAs the drain printed while the held orders were paid, against
	// when it was done.
	var etas []string
	for _, e := range events {
		if e.Event == "drain" && e.Drain != nil && e.Drain.ETASeconds != nil && e.Drain.Shard == "blue-1" {
			etas = append(etas, fmt.Sprintf("at +%.1fs: %.1fs (actual %.1fs)", e.At.Sub(paid).Seconds(), *e.Drain.ETASeconds, done.Sub(e.At).Seconds()))
		}
	}
	t.Logf("drain of blue took %v, %v of it after the first held order was paid; ETAs printed: %s",
		done.Sub(drainStart).Round(100*time.Millisecond), done.Sub(paid).Round(100*time.Millisecond), strings.Join(etas, "; "))
	if done.Sub(drainStart) < 2*time.Second {
		t.Errorf("the drain ended %v after it began, before the held orders were paid", done.Sub(drainStart))
	}

	if st := runBin(t, bin, f.env, "", "cutover", "status"); st.code != 0 || !strings.Contains(st.stdout, "Done") {
		t.Errorf("cutover status: exit %d: %s%s", st.code, st.stdout, st.stderr)
	}
	for _, id := range []string{"blue-1", "blue-2"} {
		if st := shardState(t, f.env, id); st != "OUT_OF_SERVICE" {
			t.Errorf("%s is %s after the cutover, want OUT_OF_SERVICE", id, st)
		}
	}
	if v := f.view(t); v.Weights["green"] != 100 || v.Weights["blue"] != 0 {
		t.Errorf("the proxy's weights after the cutover: %v", v.Weights)
	}

	w.halt()
	budget.Eventually(t, 60*time.Second, "every order to ship", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.done) >= len(w.orders)+len(legacyKeys)
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failed) > 0 {
		t.Errorf("%d creates failed, e.g. %v", len(w.failed), w.failed[0])
	}
	for key := range w.orders {
		if !w.done[key] {
			t.Errorf("order %d (slot %d) did not ship", key, slotOf(key))
		}
	}
	blue1Slot := 0
	for _, sh := range f.view(t).Shards {
		if sh.ID == "blue-1" {
			blue1Slot = sh.Slot
		}
	}
	for _, key := range legacyKeys {
		// The proxy hands out blue-1's keys with its slot.
		if !w.done[key|int64(blue1Slot)<<58] {
			t.Errorf("legacy order %d, started on blue-1 before the proxy, did not ship", key)
		}
	}
	t.Logf("%d orders and %d legacy orders shipped, none failed", len(w.orders), len(legacyKeys))
	log, err := os.ReadFile(logFile)
	if err != nil || strings.Count(string(log), "\n") != len(events) {
		t.Errorf("--log holds %d lines, stdout %d events (%v)", strings.Count(string(log), "\n"), len(events), err)
	}
}

// runBinFor is runBin with a longer limit, for commands that wait.
func runBinFor(t *testing.T, limit time.Duration, path string, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return runCtx(t, ctx, path, env, stdin, args...)
}
