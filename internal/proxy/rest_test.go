package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/restgateway/sdktest"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// startRESTProxy is a proxy over shards serving the REST API too, and the
// base address of its /v2.
func startRESTProxy(t *testing.T, shards []*sim.Sim) (*Proxy, string) {
	t.Helper()
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), RESTListen: "127.0.0.1:0"})
	return p, "http://" + p.RESTAddr().String()
}

// slotOf is the slot in a key the REST API gave.
func slotOf(t *testing.T, key string) int {
	t.Helper()
	k, err := strconv.ParseInt(key, 10, 64)
	if err != nil {
		t.Fatalf("key %q: %v", key, err)
	}
	slot, _ := keyslot.Split(k)
	return slot
}

// completedOn counts process instances each shard completed.
func completedOn(t *testing.T, shards []*sim.Sim) map[int]float64 {
	t.Helper()
	out := map[int]float64{}
	for i, s := range shards {
		out[i+1] = simMetric(t, s, "zeebe_element_instance_events_total", `action="completed"`, `type="PROCESS"`)
	}
	return out
}

// TestCamundaSDKThroughTheProxy runs Camunda's SDK unchanged, strict
// validation on, through the proxy over three simulators: one deployment
// of four processes reaches every shard, the instances are spread by the
// placement and each completes on the shard its key names, exactly once;
// the message and the signal reach the shards their instances wait on;
// the incident is resolved on the shard that raised it.
func TestCamundaSDKThroughTheProxy(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 2})
	p, base := startRESTProxy(t, shards)
	sdk := sdktest.New(t, base)
	const n = 12
	o := sdk.Workload(t, n)

	// Where each instance lives, by the slot in its key.
	want := map[int]float64{}
	for _, k := range append(o.Instances, o.Awaited, o.Waiting, o.Signalled, o.Failing) {
		want[slotOf(t, k)]++
	}
	if len(want) < 2 {
		t.Errorf("instances on slots %v: want them spread over the shards", want)
	}
	for i := range shards {
		if n := proxyMetric(t, p, "shardctl_proxy_shard_requests_total", fmt.Sprintf(`shard="shard-%d"`, i+1), `rpc="DeployResource"`, `code="OK"`); n != 1 {
			t.Errorf("shard-%d: the deployment reached it %v times, want once", i+1, n)
		}
	}

	// The incident is on the failing instance's shard; its key through
	// the proxy carries that shard's slot.
	slot := slotOf(t, o.FailedJob)
	if slotOf(t, o.Failing) != slot {
		t.Errorf("failed job %s and its instance %s on different slots", o.FailedJob, o.Failing)
	}
	incidents, err := shards[slot-1].Incidents(budget.Context(t, 10*time.Second))
	if err != nil || len(incidents) != 1 {
		t.Fatalf("shard-%d's incidents: %+v (%v), want one", slot, incidents, err)
	}
	sdk.Resolve(t, o.FailedJob, strconv.FormatInt(keyslot.With(incidents[0].Key, slot), 10))

	assertEndedWhereKeysSay(t, shards, want, o.Cancelled)
	// The proxy counted the REST calls as the gRPC ones they became.
	if got := proxyMetric(t, p, "shardctl_proxy_requests_total", `rpc="CreateProcessInstance"`, `code="OK"`); got != n+4 {
		t.Errorf("CreateProcessInstance through the proxy: %v, want %d", got, n+4)
	}
}

// assertEndedWhereKeysSay: the shards completed the instances want
// counts per slot, and the one cancelled was terminated on its slot's
// shard, nowhere else.
func assertEndedWhereKeysSay(t *testing.T, shards []*sim.Sim, want map[int]float64, cancelled string) {
	t.Helper()
	if got := completedOn(t, shards); !equalCounts(got, want) {
		t.Errorf("instances completed per slot %v, want %v (where the placement put them)", got, want)
	}
	cancelledOn := slotOf(t, cancelled)
	for i, s := range shards {
		got := simMetric(t, s, "zeebe_element_instance_events_total", `action="terminated"`, `type="PROCESS"`)
		if w := map[bool]float64{true: 1}[i+1 == cancelledOn]; got != w {
			t.Errorf("shard-%d terminated %v instances, want %v", i+1, got, w)
		}
	}
}

func equalCounts(a, b map[int]float64) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

// TestRESTAndGRPCShareKeys puts Camunda's SDK (REST) and the Zeebe Go
// client (gRPC) on one federation: instances one protocol starts have
// their jobs completed over the other, and a key from either cancels an
// instance over the other.
func TestRESTAndGRPCShareKeys(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 2})
	p, base := startRESTProxy(t, shards)
	sdk := sdktest.New(t, base)
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, 2*time.Minute)
	three := sdktest.Files()["three.bpmn"]
	if _, err := c.NewDeployResourceCommand().AddResource(three, "three.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}

	// REST starts, gRPC works.
	const n = 6
	restKeys := sdk.Create(t, n)
	var mu sync.Mutex
	done := map[int64]int{} // jobs completed per instance
	var workers []worker.JobWorker
	for _, typ := range sdktest.ThreeTypes {
		// Short polls: closing a worker waits for its poll in flight.
		workers = append(workers, c.NewJobWorker().JobType(typ).Handler(func(jc worker.JobClient, job entities.Job) {
			if _, err := jc.NewCompleteJobCommand().JobKey(job.GetKey()).Send(ctx); err == nil {
				mu.Lock()
				done[job.GetProcessInstanceKey()]++
				mu.Unlock()
			}
		}).PollInterval(50*time.Millisecond).RequestTimeout(time.Second).Open())
	}
	closeWorkers := sync.OnceFunc(func() {
		for _, w := range workers {
			w.Close()
		}
	})
	t.Cleanup(closeWorkers)
	deadline := time.Now().Add(budget.Of(30 * time.Second))
	for {
		mu.Lock()
		finished := 0
		for _, k := range restKeys {
			ik, _ := strconv.ParseInt(k, 10, 64)
			if done[ik] == len(sdktest.ThreeTypes) {
				finished++
			}
		}
		mu.Unlock()
		if finished == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Go client completed every job of %d of the %d instances the SDK started", finished, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The Go client's workers stop before the next instances start, so
	// that the SDK's take their jobs.
	closeWorkers()

	// gRPC starts, REST works.
	for range n {
		if _, err := c.NewCreateInstanceCommand().BPMNProcessId("three").LatestVersion().Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sdk.Work(t, n*len(sdktest.ThreeTypes))
	if got := completedOn(t, shards); got[1]+got[2]+got[3] != 2*n {
		t.Errorf("instances completed %v, want %d in all", got, 2*n)
	}

	// A key crosses: REST cancels what gRPC started, and the other way.
	g, err := c.NewCreateInstanceCommand().BPMNProcessId("three").LatestVersion().Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancelOverREST(t, base, strconv.FormatInt(g.GetProcessInstanceKey(), 10))
	r := sdk.Create(t, 1)[0]
	rk, _ := strconv.ParseInt(r, 10, 64)
	if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(rk).Send(ctx); err != nil {
		t.Errorf("cancel over gRPC the instance %s REST started: %v", r, err)
	}
	var terminated float64
	for _, s := range shards {
		terminated += simMetric(t, s, "zeebe_element_instance_events_total", `action="terminated"`, `type="PROCESS"`)
	}
	if terminated != 2 {
		t.Errorf("instances terminated: %v, want 2", terminated)
	}
}

// restReply is one answer of the REST API.
type restReply struct {
	status      int
	contentType string
	body        []byte
}

func restCall(t *testing.T, method, url, contentType string, body []byte) restReply {
	t.Helper()
	req, err := http.NewRequestWithContext(budget.Context(t, 30*time.Second), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return restReply{resp.StatusCode, resp.Header.Get("Content-Type"), b}
}

func cancelOverREST(t *testing.T, base, key string) {
	t.Helper()
	if r := restCall(t, "POST", base+"/v2/process-instances/"+key+"/cancellation", "", nil); r.status != http.StatusNoContent {
		t.Errorf("cancel over REST the instance %s: %d %s", key, r.status, r.body)
	}
}

// TestRESTBadInput: what a client sends wrong gets the problem detail a
// Camunda 8.8 gateway gives, from the proxy itself — nothing reaches a
// shard — and the proxy goes on serving.
func TestRESTBadInput(t *testing.T) {
	shards := simtest.StartN(t, 2, sim.Config{Partitions: 1})
	p, base := startRESTProxy(t, shards)
	unknownSlot := strconv.FormatInt(keyslot.With(12345, 9), 10)
	big := append([]byte(`{"processDefinitionId":"p","variables":{"x":"`), bytes.Repeat([]byte("x"), 5<<20)...)
	big = append(big, `"}}`...)
	for _, tc := range []struct {
		name, method, path, contentType, body string
		raw                                   []byte
		status                                int
		title, detail                         string
	}{
		{name: "malformed JSON", method: "POST", path: "/v2/process-instances", contentType: "application/json", body: `{"processDefinitionId":`,
			status: 400, title: "Bad Request", detail: "Failed to read request"},
		{name: "a key as a number", method: "POST", path: "/v2/process-instances", contentType: "application/json", body: `{"processDefinitionKey":123}`,
			status: 400, title: "Bad Request", detail: "Request property [processDefinitionKey] cannot be parsed"},
		{name: "variables not an object", method: "POST", path: "/v2/process-instances", contentType: "application/json", body: `{"processDefinitionId":"p","variables":[1]}`,
			status: 400, title: "Bad Request", detail: "Request property [variables] cannot be parsed"},
		{name: "unknown property", method: "POST", path: "/v2/process-instances", contentType: "application/json", body: `{"processDefinitionId":"p","colour":"red"}`,
			status: 400, title: "Bad Request", detail: "Request property [colour] cannot be parsed"},
		{name: "wrong content type", method: "POST", path: "/v2/process-instances", contentType: "text/plain", body: `{"processDefinitionId":"p"}`,
			status: 415, title: "Unsupported Media Type", detail: "Content-Type 'text/plain' is not supported."},
		{name: "deployment not multipart", method: "POST", path: "/v2/deployments", contentType: "application/json", body: `{}`,
			status: 415, title: "Unsupported Media Type"},
		{name: "validation", method: "POST", path: "/v2/jobs/activation", contentType: "application/json", body: `{"maxJobsToActivate":1}`,
			status: 400, title: "INVALID_ARGUMENT", detail: "No type provided. No timeout provided."},
		{name: "key of an unknown slot", method: "POST", path: "/v2/jobs/" + unknownSlot + "/completion", contentType: "application/json", body: `{}`,
			status: 404, title: "NOT_FOUND", detail: "no shard has slot 9"},
		{name: "key not a number", method: "POST", path: "/v2/process-instances/abc/cancellation",
			status: 400, title: "Bad Request", detail: "Failed to convert 'processInstanceKey' with value: 'abc'"},
		{name: "body over the limit", method: "POST", path: "/v2/process-instances", contentType: "application/json", raw: big,
			status: 413, title: "Payload Too Large"},
		{name: "unknown endpoint", method: "GET", path: "/v2/nothing-here",
			status: 404, title: "Not Found"},
		{name: "physical tenant without an API", method: "GET", path: "/physical-tenants/t1/topology",
			status: 404, title: "Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.raw
			if body == nil {
				body = []byte(tc.body)
			}
			r := restCall(t, tc.method, base+tc.path, tc.contentType, body)
			var pd struct {
				Type, Title, Detail, Instance string
				Status                        int
			}
			if err := json.Unmarshal(r.body, &pd); err != nil || r.contentType != "application/problem+json" {
				t.Fatalf("%d %s %q: want a problem detail (%v)", r.status, r.contentType, r.body, err)
			}
			if r.status != tc.status || pd.Status != tc.status || pd.Title != tc.title || !strings.Contains(pd.Detail, tc.detail) || pd.Instance != tc.path {
				t.Errorf("%d %+v, want %d %q with %q at %s", r.status, pd, tc.status, tc.title, tc.detail, tc.path)
			}
		})
	}
	for _, rpc := range []string{"CreateProcessInstance", "CompleteJob", "ActivateJobs", "DeployResource", "CancelProcessInstance"} {
		if n := proxyMetric(t, p, "shardctl_proxy_shard_requests_total", `rpc="`+rpc+`"`); n != 0 {
			t.Errorf("%s reached the shards %v times, want none", rpc, n)
		}
	}

	// Still serving, the physical tenant's prefix too.
	for _, path := range []string{"/v2/topology", "/physical-tenants/t1/v2/topology"} {
		if r := restCall(t, "GET", base+path, "", nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"shard-2/`) {
			t.Errorf("GET %s after the bad requests: %d %s", path, r.status, r.body)
		}
	}
}

// activate long-polls for jobs over REST.
func activate(ctx context.Context, base, jobType string, pollMillis int) (*http.Response, error) {
	body := fmt.Sprintf(`{"type":%q,"timeout":300000,"maxJobsToActivate":5,"requestTimeout":%d}`, jobType, pollMillis)
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v2/jobs/activation", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// TestRESTLongPollOfAGoneClient: a REST worker that goes away during its
// long poll leaves no job locked: what the shards activate for it is
// handed back, and the next worker gets it at once, not after the five
// minutes the first one asked for.
func TestRESTLongPollOfAGoneClient(t *testing.T) {
	shards := simtest.StartN(t, 2, sim.Config{Partitions: 1})
	p, base := startRESTProxy(t, shards)
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("gone", "gone-task"), "gone.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	pollCtx, cancel := context.WithCancel(ctx)
	polled := make(chan error, 1)
	go func() {
		resp, err := activate(pollCtx, base, "gone-task", 30000)
		if err == nil {
			_ = resp.Body.Close()
		}
		polled <- err
	}()
	// The poll waits on both shards; then its client leaves, and only
	// then do the jobs appear.
	budget.Eventually(t, 10*time.Second, "the long poll to reach both shards", func() bool {
		return proxyMetric(t, p, "shardctl_proxy_long_calls_open") == 1
	})
	cancel()
	<-polled
	for range 2 {
		if _, err := c.NewCreateInstanceCommand().BPMNProcessId("gone").LatestVersion().Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	budget.Eventually(t, 10*time.Second, "the jobs to be handed back", func() bool {
		return proxyMetric(t, p, "shardctl_proxy_jobs_handed_back_total") >= 1
	})
	got := 0
	deadline := time.Now().Add(budget.Of(20 * time.Second))
	for got < 2 && time.Now().Before(deadline) {
		resp, err := activate(ctx, base, "gone-task", 1000)
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ Jobs []struct{ JobKey string } }
		err = json.NewDecoder(resp.Body).Decode(&out)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		got += len(out.Jobs)
	}
	if got != 2 {
		t.Errorf("the next worker got %d of the 2 jobs (handed back %v)", got, proxyMetric(t, p, "shardctl_proxy_jobs_handed_back_total"))
	}
}

// TestRESTLongPollEndsWhenTheProxyStops: a stopping proxy answers an open
// REST long poll (no jobs: the worker polls again, elsewhere) rather than
// hold its stop for the poll's minute.
func TestRESTLongPollEndsWhenTheProxyStops(t *testing.T) {
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	p, base := startRESTProxy(t, shards)
	ctx := budget.Context(t, time.Minute)
	type result struct {
		status int
		body   string
		err    error
	}
	polled := make(chan result, 1)
	go func() {
		resp, err := activate(ctx, base, "never", 60000)
		if err != nil {
			polled <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		polled <- result{resp.StatusCode, string(b), err}
	}()
	budget.Eventually(t, 10*time.Second, "the long poll to open", func() bool { return proxyMetric(t, p, "shardctl_proxy_long_calls_open") == 1 })
	start := time.Now()
	closeCtx, cancel := context.WithTimeout(ctx, budget.Of(10*time.Second))
	defer cancel()
	if err := p.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	r := <-polled
	if r.err != nil || r.status != http.StatusOK || r.body != `{"jobs":[]}` {
		t.Errorf("the open poll got %d %q (%v), want 200 and no jobs", r.status, r.body, r.err)
	}
	if d := time.Since(start); d > budget.Of(10*time.Second) {
		t.Errorf("the stop took %v", d)
	}
}
