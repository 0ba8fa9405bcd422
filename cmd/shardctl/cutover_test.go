package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
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
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
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

// newBlueGreen is a federation of one blue shard and one green shard,
// green registered OUT_OF_SERVICE as a cutover's target is.
func newBlueGreen(t *testing.T) *federation {
	f := newFederation(t)
	f.startSim(t, "blue-1", "blue")
	f.startSim(t, "green-1", "green", "--status", "OUT_OF_SERVICE")
	return f
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
	budget.Eventually(t, 20*time.Second, fmt.Sprintf("the proxy to follow %d shards", len(f.sims)), func() bool { return len(f.view(t).Shards) == len(f.sims) })
}

// deploy deploys the order process through c.
func deploy(t *testing.T, ctx context.Context, c zbc.Client) {
	t.Helper()
	if _, err := c.NewDeployResourceCommand().AddResource(orderProcess, "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
}

// newFederation starts a registry (extra: more of its flags) for a
// federation's processes.
func newFederation(t *testing.T, extra ...string) *federation {
	reg := proctest.Start(t, bin, nil, append([]string{"registry", "serve", "--listen", "127.0.0.1:0", "--eviction-interval", "1s"}, extra...)...)
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
		}).MaxJobsActive(64).Concurrency(4).PollInterval(20 * time.Millisecond).RequestTimeout(time.Second).Timeout(10 * time.Second).BackoffSupplier(load.Backoff()).Open()
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
	t.Parallel()
	f := newFederation(t)
	f.startSim(t, "blue-1", "blue")
	// Before the proxy: the legacy cluster, used directly by clients.
	legacyAddr := f.sims["blue-1"].Addr
	legacy := simtest.Client(t, legacyAddr)
	ctx := budget.Context(t, 5*time.Minute)
	deploy(t, ctx, legacy)
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
	green := map[int]bool{}
	for _, s := range f.view(t).Shards {
		if s.Pool == "green" {
			green[s.Slot] = true
		}
	}

	client := simtest.Client(t, f.proxy.Addr)
	deploy(t, ctx, client)
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
			"--step-pause", "6s", "--gate-window", "30s", "--gates", gates, "--poll", "500ms", "--yes", "--log", logFile, "-o", "json")
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
		// Pools are drawn at random by weight: the band is 4 standard
		// deviations of that draw (about ±7 points at 50% of 800 orders),
		// 5 points at least.
		tol := max(0.05, 4*math.Sqrt(want*(1-want)/float64(max(n, 1))))
		if share < want-tol || share > want+tol {
			t.Errorf("step %d: green got %.1f%% of %d new orders, want %d%% ± %.1f", i+1, share*100, n, e.Weights["green"], tol*100)
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

// A green shard pushed past its knee during a step: the gate fails, the
// weights go back to blue at once (within one gate interval), exit 3,
// and every accepted order still ships.
func TestCutoverRollsBackOnAFailingGate(t *testing.T) {
	t.Parallel()
	f := newFederation(t)
	f.startSim(t, "blue-1", "blue")
	// Green: one partition of 200 records/s; the test slows it twenty
	// times when the 60% step begins, far past its knee (every "paid"
	// message reaches every shard too, 60 a second here).
	f.startSim(t, "green-1", "green", "--status", "OUT_OF_SERVICE", "--partitions", "1", "--capacity", "200")
	greenAdmin := strings.TrimSuffix(f.sims["green-1"].Line(t, "metrics on "), "/metrics")
	// Pacing would hold green's queue at its target and send its share to
	// blue, which is what it is for; this test is about a failing gate and
	// the rollback, so the proxy lets green's queue grow.
	f.startProxy(t, "--instance-limit", "-1")
	client := simtest.Client(t, f.proxy.Addr)
	ctx := budget.Context(t, 5*time.Minute)
	deploy(t, ctx, client)
	w := startWorkload(t, client, 60)
	budget.Eventually(t, 20*time.Second, "orders to ship", func() bool { return w.shipped.Load() > 20 })

	gates := writeGates(t, `gates:
- name: green-queue
  signal: queue
  failureCondition: result[0] > 100
  interval: 1s
`)
	logFile := filepath.Join(t.TempDir(), "cutover.jsonl")
	applied := make(chan result, 1)
	go func() {
		applied <- runBinFor(t, budget.Of(3*time.Minute), bin, f.env, "", "cutover", "apply", "--from", "blue", "--to", "green", "--steps", "5,60,100",
			"--step-pause", "8s", "--gate-window", "30s", "--gates", gates, "--yes", "-o", "json", "--log", logFile)
	}()
	budget.Eventually(t, 2*time.Minute, "the 60% step", func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), `"stepName":"weights: green 60%"`)
	})
	fault := func(path string) {
		resp, err := http.Post(greenAdmin+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	fault("/fault/slow?factor=20")
	r := <-applied
	fault("/fault/resume")
	if r.code != 3 {
		t.Fatalf("cutover apply: exit %d, want 3 (rolled back)\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	if v := f.view(t); v.Weights["blue"] != 100 || v.Weights["green"] != 0 {
		t.Errorf("the proxy's weights after the rollback: %v", v.Weights)
	}
	var failedAt, rolledAt time.Time
	var step int
	for _, e := range cutoverEvents(t, r.stdout) {
		if e.Event == "gate" && e.Gate != nil && e.Gate.Phase == "Failed" && failedAt.IsZero() {
			failedAt, step = e.At, e.Step
		}
		if e.Event == "rolledback" {
			rolledAt = e.At
			if !strings.Contains(e.Message, "keeps and finishes") {
				t.Errorf("the rollback does not say green keeps its instances: %q", e.Message)
			}
		}
	}
	if failedAt.IsZero() || rolledAt.IsZero() || step != 2 {
		t.Fatalf("failed gate at %v (step %d), rollback at %v: want a failure in the 60%% step\n%s", failedAt, step, rolledAt, r.stdout)
	}
	if d := rolledAt.Sub(failedAt); d > time.Second {
		t.Errorf("weights went back %v after the failed measurement, want within the gate interval (1s)", d)
	}
	t.Logf("gate failed in step %d; weights back to blue %v later", step, rolledAt.Sub(failedAt).Round(time.Millisecond))
	if st := runBin(t, bin, f.env, "", "cutover", "status"); st.code != 3 || !strings.Contains(st.stdout, "RolledBack") {
		t.Errorf("cutover status after a rollback: exit %d, want 3: %s%s", st.code, st.stdout, st.stderr)
	}

	w.halt()
	halted := time.Now()
	budget.Eventually(t, 2*time.Minute, "every accepted order to ship", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.done) >= len(w.orders)
	})
	t.Logf("every accepted order shipped %v after the load stopped", time.Since(halted).Round(100*time.Millisecond))
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failed) > 0 {
		t.Errorf("%d creates failed, e.g. %v", len(w.failed), w.failed[0])
	}
}

// kill -9 of apply while blue drains: apply again resumes at the drain
// (no step done twice) and finishes; a second apply beside a running one
// is refused, naming the holder.
func TestCutoverResumesAfterKill(t *testing.T) {
	t.Parallel()
	f := newBlueGreen(t)
	f.startProxy(t)
	client := simtest.Client(t, f.proxy.Addr)
	ctx := budget.Context(t, 5*time.Minute)
	deploy(t, ctx, client)
	w := startWorkload(t, client, 20)
	// Orders held on blue, unpaid: the drain cannot end until they are.
	for i := range 5 {
		cmd, _ := client.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().VariablesFromMap(map[string]any{"orderId": fmt.Sprintf("held-%d", i)})
		if _, err := cmd.Send(ctx); err != nil {
			t.Fatal(err)
		}
	}

	logFile := filepath.Join(t.TempDir(), "cutover.jsonl")
	args := []string{"cutover", "apply", "--from", "blue", "--to", "green", "--steps", "50,100", "--step-pause", "3s",
		"--gate-window", "30s", "--poll", "300ms", "--lease-ttl", "30s", "--yes", "--log", logFile}
	first, firstOut := startBin(t, f.env, bin, args...)
	if err := budget.Wait(budget.Of(time.Minute), func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), `"event":"weights"`)
	}); err != nil {
		t.Fatalf("the first apply set no weights: %v\n%s", err, firstOut.String())
	}
	second := runBin(t, bin, f.env, "", args...)
	if second.code != 3 || !strings.Contains(second.stderr, "is run by") {
		t.Errorf("a second apply beside the first: exit %d, want 3 naming the holder: %s", second.code, second.stderr)
	}
	budget.Eventually(t, time.Minute, "the drain of blue", func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), `"event":"drain"`)
	})
	_ = first.Process.Kill() // SIGKILL: no lease released, nothing said
	_ = first.Wait()
	before, _ := os.ReadFile(logFile)
	var rec struct{ Phase, Holder string }
	getRegistryJSON(t, f.regURL, "/shardctl/v1/cutovers/blue-to-green", &rec)
	if rec.Phase != "Draining" || rec.Holder == "" {
		t.Fatalf("after the kill: %+v, want Draining and the dead holder's lease", rec)
	}

	resumed := make(chan result, 1)
	go func() {
		resumed <- runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", append(args, "-o", "json")...)
	}()
	time.Sleep(time.Second)
	for i := range 5 {
		if _, err := client.NewPublishMessageCommand().MessageName("paid").CorrelationKey(fmt.Sprintf("held-%d", i)).TimeToLive(time.Minute).Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r := <-resumed
	if r.code != 0 {
		t.Fatalf("apply after the kill: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	events := cutoverEvents(t, r.stdout)
	if events[0].Event != "resumed" || !strings.Contains(events[0].Message, "step 4 of 5") {
		t.Errorf("first event %+v: want resumed at the drain", events[0])
	}
	for _, e := range events {
		if e.Event == "weights" || e.Event == "started" {
			t.Errorf("the resumed apply did %q again: %+v", e.Event, e)
		}
	}
	if events[len(events)-1].Event != "done" {
		t.Errorf("last event %+v, want done", events[len(events)-1])
	}
	if shardState(t, f.env, "blue-1") != "OUT_OF_SERVICE" {
		t.Error("blue-1 is not OUT_OF_SERVICE after the resumed cutover")
	}
	t.Logf("the first apply logged %d events before the kill; the second resumed and logged %d", strings.Count(string(before), "\n"), len(events))
	w.halt()
}

func getRegistryJSON(t *testing.T, regURL, path string, v any) {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(regURL, "/eureka") + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// Gates that get no data, through a real Prometheus: exit 3 under noData
// fail, 6 under inconclusive (paused, status says so); bad PromQL is bad
// input, found before anything changes.
func TestCutoverGatesWithoutData(t *testing.T) {
	t.Parallel()
	f := newBlueGreen(t)
	metrics := map[string]string{}
	for id, p := range f.sims {
		metrics[id] = strings.TrimSuffix(strings.TrimPrefix(p.Line(t, "metrics on "), "http://"), "/metrics")
	}
	prom := proctest.Prometheus(t, "", metrics)
	env := append(f.env, "SHARDCTL_PROMETHEUS="+prom)
	proctest.WaitScraped(t, prom, 2)
	apply := func(gates string) result {
		return runBinFor(t, budget.Of(2*time.Minute), bin, env, "", "cutover", "apply", "--from", "blue", "--to", "green",
			"--step-pause", "2s", "--gate-window", "1m", "--gates", writeGates(t, gates), "--yes")
	}
	const nothing = `gates:
- name: nothing-there
  query: sum(shardctl_no_such_metric{cluster=~"{{.To}}"})
  successCondition: result[0] < 1
  noData: %s
`
	if r := apply(fmt.Sprintf(nothing, "fail")); r.code != 3 || !strings.Contains(r.stdout+r.stderr, "no data") {
		t.Errorf("noData fail: exit %d, want 3 naming no data\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := apply(fmt.Sprintf(nothing, "inconclusive")); r.code != 6 {
		t.Errorf("noData inconclusive: exit %d, want 6\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st := runBin(t, bin, env, "", "cutover", "status"); st.code != 6 || !strings.Contains(st.stdout, "inconclusive") {
		t.Errorf("status of an inconclusive cutover: exit %d, want 6: %s%s", st.code, st.stdout, st.stderr)
	}
	if r := runBin(t, bin, env, "", "cutover", "rollback"); r.code != 0 {
		t.Errorf("rollback: exit %d: %s", r.code, r.stderr)
	}
	if r := runBin(t, bin, env, "", "cutover", "rollback"); r.code != 0 {
		t.Errorf("a second rollback: exit %d: %s", r.code, r.stderr)
	}
	var list struct{ Cutovers []struct{ Version int } }
	getRegistryJSON(t, f.regURL, "/shardctl/v1/cutovers", &list)
	version := list.Cutovers[0].Version
	r := apply(`gates:
- name: broken
  query: sum(rate(zeebe_element_instance_events_total[1m]) by
  failureCondition: result[0] > 1
`)
	if r.code != 1 || !strings.Contains(r.stderr, "bad PromQL") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
		t.Errorf("bad PromQL: exit %d, want 1 and one line naming it: %s", r.code, r.stderr)
	}
	getRegistryJSON(t, f.regURL, "/shardctl/v1/cutovers", &list)
	if list.Cutovers[0].Version != version {
		t.Errorf("bad PromQL changed the cutover record (version %d → %d)", version, list.Cutovers[0].Version)
	}
}

// Bad input gets one clear line and changes nothing in the registry.
func TestCutoverBadInput(t *testing.T) {
	t.Parallel()
	f := newFederation(t)
	f.startSim(t, "blue-1", "blue")
	f.startSim(t, "green-1", "green")
	f.startSim(t, "purple-1", "purple")
	if r := runBin(t, bin, f.env, "", "shards", "drain", "purple-1"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	typo := writeGates(t, "gates:\n- name: x\n  signall: level\n")
	badExpr := writeGates(t, "gates:\n- name: x\n  signal: level\n  failureCondition: result[0] >>> 2\n")
	queryGate := writeGates(t, "gates:\n- name: q\n  query: up\n  successCondition: result[0] > 0\n")
	planFile := filepath.Join(t.TempDir(), "plan.json")
	if r := runBin(t, bin, f.env, "", "cutover", "plan", "--from", "blue", "--to", "green", "--out", planFile); r.code != 0 || !strings.Contains(r.stdout, "fingerprint") {
		t.Fatalf("plan: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cutover", "plan", "--from", "blue", "--to", "orange"}, 1, `no shard in pool "orange"`},
		{[]string{"cutover", "apply", "--from", "blue", "--to", "purple", "--yes"}, 1, "pool purple has no UP shard"},
		{[]string{"cutover", "apply", "--from", "blue", "--to", "green", "--gates", typo, "--yes"}, 1, typo + `:3:3: unknown field "signall"`},
		{[]string{"cutover", "plan", "--from", "blue", "--to", "green", "--gates", typo}, 1, typo + `:3:3: unknown field "signall"`},
		{[]string{"cutover", "plan", "--from", "blue", "--to", "blue"}, 2, "two different pools"},
		{[]string{"cutover", "plan", "--from", "blue", "--to", "green", "--gates", queryGate}, 2, "needs --prometheus"},
		{[]string{"cutover", "apply", "--from", "blue", "--to", "green", "--gates", queryGate, "--yes"}, 2, "needs --prometheus"},
		{[]string{"cutover", "plan", "--from", "blue", "--to", "green", "--pause-before", "lunch"}, 2, "--pause-before"},
		{[]string{"cutover", "apply", "--plan", planFile, "--steps", "10,100", "--yes"}, 2, "--steps with --plan"},
		{[]string{"cutover", "apply", "--plan", planFile, "--from", "blue", "--yes"}, 2, "--from with --plan"},
		{[]string{"cutover", "apply", "--plan", planFile, "--gates", badExpr, "--yes"}, 2, "--gates with --plan"},
		{[]string{"cutover", "apply", "--plan", planFile, "--pause-before", "lunch", "--yes"}, 2, "--pause-before"},
		{[]string{"cutover", "apply", "--plan", planFile, "--prometheus", "http://127.0.0.1:1", "--scrape", "x=http://127.0.0.1:1/metrics", "--yes"}, 2, "pick one"},
		{[]string{"cutover", "rollback", "--yes"}, 1, "no cutover"},
		{[]string{"cutover", "promote", "--yes"}, 1, "no cutover"},
		{[]string{"cutover", "apply", "--from", "blue", "--to", "green", "--gates", badExpr, "--yes"}, 1, "failureCondition"},
		{[]string{"cutover", "apply", "--from", "blue", "--to", "green", "--steps", "10,x", "--yes"}, 2, "--steps"},
		{[]string{"cutover", "apply", "--from", "blue", "--to", "green", "--steps", "50,10", "--yes"}, 2, "rising"},
		{[]string{"cutover", "apply", "--to", "green", "--yes"}, 2, "--from and --to"},
		{[]string{"cutover", "apply", "--from", "blue", "--to", "green"}, 2, "--yes"},
		{[]string{"cutover", "apply", "--from", "blue", "--to", "green", "--yes", "--registry", "http://127.0.0.1:1/eureka"}, 1, "unreachable"},
		{[]string{"cutover", "apply", "--from", "blue", "--to", "green", "--yes", "--prometheus", "http://127.0.0.1:1", "--gates",
			writeGates(t, "gates:\n- name: q\n  query: up\n  successCondition: result[0] > 0\n")}, 1, "connection refused"},
		{[]string{"cutover", "status"}, 1, "no cutover"},
	} {
		r := runBin(t, bin, f.env, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
			t.Errorf("%v: exit %d, stderr %q; want %d and a line with %q", tc.args[1:], r.code, r.stderr, tc.code, tc.want)
		}
	}
	// The registry moves on after the plan was made.
	if r := runBin(t, bin, f.env, "", "shards", "drain", "blue-1"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	r := runBin(t, bin, f.env, "", "cutover", "apply", "--plan", planFile, "--yes")
	if r.code != 3 || !strings.Contains(r.stderr, "blue-1 was UP") {
		t.Errorf("a plan the registry moved on from: exit %d, want 3 saying what changed: %s", r.code, r.stderr)
	}
	var list struct{ Cutovers []any }
	getRegistryJSON(t, f.regURL, "/shardctl/v1/cutovers", &list)
	if len(list.Cutovers) != 0 {
		t.Errorf("bad input left cutover records: %v", list.Cutovers)
	}
	for id, want := range map[string]string{"blue-1": "DRAINING", "green-1": "UP", "purple-1": "DRAINING"} {
		if st := shardState(t, f.env, id); st != want {
			t.Errorf("%s is %s, want %s", id, st, want)
		}
	}
}

// cutover rollback during an apply: new work goes back to blue at once,
// the apply stops (exit 3) saying who rolled it back; a second rollback
// changes nothing more.
func TestCutoverRollbackPreemptsApply(t *testing.T) {
	t.Parallel()
	f := newBlueGreen(t)
	f.startProxy(t)
	logFile := filepath.Join(t.TempDir(), "cutover.jsonl")
	applied := make(chan result, 1)
	go func() {
		applied <- runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", "cutover", "apply", "--from", "blue", "--to", "green",
			"--steps", "50,100", "--step-pause", "10m", "--gate-window", "30s", "--lease-ttl", "3s", "--yes", "--log", logFile)
	}()
	budget.Eventually(t, time.Minute, "the 50% step", func() bool {
		b, _ := os.ReadFile(logFile)
		select {
		case r := <-applied:
			// An apply that ended before its first step is the failure to
			// report, not the wait.
			t.Fatalf("the apply ended before the 50%% step: exit %d\n%s%s\nits log:\n%s", r.code, r.stdout, r.stderr, b)
		default:
		}
		return strings.Contains(string(b), `"event":"weights"`)
	})
	if v := f.view(t); v.Weights["green"] != 50 {
		t.Fatalf("weights during the step: %v", v.Weights)
	}
	// The lease is renewed every second; a watch prints what changed, not
	// each renewal (gates measure every 10 s: one change at most).
	watch := runBinFor(t, budget.Of(time.Minute), bin, f.env, "", "cutover", "status", "--watch", "-o", "json", "--timeout", "4s")
	if n := strings.Count(strings.TrimSpace(watch.stdout), "\n") + 1; watch.code != 4 || n > 2 {
		t.Errorf("status --watch over 4 s of a holding step: exit %d, %d lines, want 4 and at most 2:\n%s%s", watch.code, n, watch.stdout, watch.stderr)
	}
	rolled := time.Now()
	if r := runBin(t, bin, f.env, "", "cutover", "rollback"); r.code != 0 || !strings.Contains(r.stdout, "new instances go to blue again") {
		t.Fatalf("rollback: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	budget.Eventually(t, 5*time.Second, "the proxy to place on blue alone", func() bool { return f.view(t).Weights["blue"] == 100 })
	t.Logf("the proxy placed on blue alone %v after rollback began", time.Since(rolled).Round(time.Millisecond))
	r := <-applied
	if r.code != 3 || !strings.Contains(r.stderr, "rolled back") {
		t.Errorf("the preempted apply: exit %d, want 3 saying it was rolled back: %s", r.code, r.stderr)
	}
	if r := runBin(t, bin, f.env, "", "cutover", "rollback"); r.code != 0 {
		t.Errorf("a second rollback: exit %d: %s", r.code, r.stderr)
	}
	if st := runBin(t, bin, f.env, "", "cutover", "status"); st.code != 3 || !strings.Contains(st.stdout, "RolledBack") {
		t.Errorf("status: exit %d: %s", st.code, st.stdout)
	}
}

// --pause-before promote: apply stops before the last step (exit 5);
// status tells CI so (exit 0 waiting for paused, 5 otherwise); promote
// runs it to its end; promoting a done cutover changes nothing.
func TestCutoverPausesForPromote(t *testing.T) {
	t.Parallel()
	f := newBlueGreen(t)
	f.startProxy(t)
	run := func(args ...string) result {
		return runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", args...)
	}
	r := run("cutover", "apply", "--from", "blue", "--to", "green", "--steps", "20,100", "--step-pause", "1s", "--gate-window", "30s",
		"--pause-before", "promote", "--poll", "100ms", "--yes")
	if r.code != 5 || !strings.Contains(r.stderr, "cutover promote") {
		t.Fatalf("apply --pause-before promote: exit %d, want 5\n%s%s", r.code, r.stdout, r.stderr)
	}
	if v := f.view(t); v.Weights["green"] != 20 {
		t.Errorf("weights while paused: %v, want green 20", v.Weights)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"cutover", "status", "--wait-for", "paused", "--timeout", "5s"}, 0},
		{[]string{"cutover", "status"}, 5},
		{[]string{"cutover", "status", "--wait-for", "done", "--timeout", "3s"}, 5},
	} {
		if r := run(tc.args...); r.code != tc.code {
			t.Errorf("%v: exit %d, want %d: %s%s", tc.args, r.code, tc.code, r.stdout, r.stderr)
		}
	}
	if r := run("cutover", "promote", "--poll", "100ms"); r.code != 0 || !strings.Contains(r.stdout, "done") {
		t.Fatalf("promote: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run("cutover", "status", "--wait-for", "done", "--timeout", "5s", "-o", "json"); r.code != 0 || !strings.Contains(r.stdout, `"phase": "Done"`) {
		t.Errorf("status after promote: exit %d: %s", r.code, r.stdout)
	}
	if r := run("cutover", "promote"); r.code != 0 || !strings.Contains(r.stdout, "already done") {
		t.Errorf("promoting a done cutover: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if st := shardState(t, f.env, "blue-1"); st != "OUT_OF_SERVICE" {
		t.Errorf("blue-1 is %s after the promoted cutover", st)
	}
}

// The runbook's cutover: a plan saved with --out, then applied with
// --pause-before promote. The pause applies (said on stderr, listed in
// what apply will do), apply stops before the last step with exit 5
// printed as a pause, not an error, every line saying when; an apply
// that would change the paused cutover's plan is refused; promote runs
// it to its end; a rollback after that leaves a status that says so.
func TestCutoverSavedPlanKeepsItsPause(t *testing.T) {
	t.Parallel()
	f := newBlueGreen(t)
	f.startProxy(t)
	run := func(args ...string) result {
		return runBinFor(t, budget.Of(2*time.Minute), bin, f.env, "", args...)
	}
	planFile := filepath.Join(t.TempDir(), "plan.json")
	if r := run("cutover", "plan", "--from", "blue", "--to", "green", "--steps", "20,100", "--step-pause", "1s", "--gate-window", "30s", "--out", planFile); r.code != 0 {
		t.Fatalf("plan: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	dry := run("cutover", "apply", "--plan", planFile, "--pause-before", "promote", "--dry-run=client")
	if dry.code != 0 || !strings.Contains(dry.stdout, "pause for cutover promote, then set weights blue 0 / green 100") {
		t.Errorf("apply --plan --pause-before --dry-run: exit %d, want the pause among what it does:\n%s%s", dry.code, dry.stdout, dry.stderr)
	}
	r := run("cutover", "apply", "--plan", planFile, "--pause-before", "promote", "--poll", "100ms", "--yes")
	if r.code != 5 {
		t.Fatalf("apply --plan --pause-before promote: exit %d, want 5 (paused)\n%s%s", r.code, r.stdout, r.stderr)
	}
	if v := f.view(t); v.Weights["green"] != 20 {
		t.Errorf("weights while paused: %v, want green 20", v.Weights)
	}
	if !strings.Contains(r.stderr, `--pause-before "promote" (the plan says "")`) {
		t.Errorf("apply did not say the pause overrides the plan: %s", r.stderr)
	}
	if last := lastLine(r.stderr); strings.HasPrefix(last, "error:") || !strings.Contains(last, "cutover promote") {
		t.Errorf("the pause's last line %q: want it said as a pause, naming cutover promote", last)
	}
	var held bool
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if _, err := time.Parse(time.TimeOnly, strings.Fields(line)[0]); err != nil {
			t.Errorf("a line without its time: %q", line)
		}
		held = held || strings.Contains(line, "weights blue 80% / green 20%; holding until ") && strings.Contains(line, "next promote: green 100%")
	}
	if !held {
		t.Errorf("no line says how long 20%% holds and what comes next:\n%s", r.stdout)
	}
	if r := run("cutover", "apply", "--from", "blue", "--to", "green", "--pause-before", "drain", "--yes"); r.code != 3 || !strings.Contains(r.stderr, "--pause-before") {
		t.Errorf("an apply that would change the paused cutover: exit %d, want 3 naming --pause-before: %s", r.code, r.stderr)
	}
	if r := run("cutover", "promote", "--poll", "100ms", "--yes"); r.code != 0 || !strings.Contains(r.stdout, "done") {
		t.Fatalf("promote: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run("cutover", "rollback", "--yes"); r.code != 0 {
		t.Fatalf("rollback: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	st := run("cutover", "status")
	if !strings.Contains(st.stdout, "RolledBack, after it was done") || strings.Contains(st.stdout, "OUT_OF_SERVICE") || strings.Contains(st.stdout, "of 5: done") {
		t.Errorf("status after the rollback of a done cutover:\n%s", st.stdout)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
