package restgateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/restgateway"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// startREST runs a simulator serving both protocols and returns it with
// its REST base URL.
func startREST(t *testing.T, cfg sim.Config) (*sim.Sim, string) {
	t.Helper()
	cfg.RESTListen = "127.0.0.1:0"
	s := simtest.Start(t, cfg)
	return s, "http://" + s.RESTAddr().String()
}

type reply struct {
	status int
	ctype  string
	body   []byte
}

func (r reply) problem(t *testing.T) (title, detail string) {
	t.Helper()
	var p struct {
		Type, Title, Detail, Instance string
		Status                        int
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem detail %q: %v", r.body, err)
	}
	if r.ctype != "application/problem+json" || p.Status != r.status || p.Type != "about:blank" || p.Instance == "" {
		t.Errorf("problem %s %q: want application/problem+json with type, status %d and instance", r.ctype, r.body, r.status)
	}
	return p.Title, p.Detail
}

func call(t *testing.T, method, url, ctype, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	ctx := budget.Context(t, 30*time.Second)
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header.Get("Content-Type"), b}
}

// deploy sends one BPMN file as Camunda's clients do: multipart, one part
// named resources.
func deploy(t *testing.T, base, name string, bpmn []byte) reply {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("resources", name)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = fw.Write(bpmn)
	_ = mw.Close()
	return call(t, http.MethodPost, base+"/v2/deployments", mw.FormDataContentType(), buf.String())
}

func TestCommandsOverREST(t *testing.T) {
	s, base := startREST(t, sim.Config{Partitions: 2})
	if r := call(t, http.MethodGet, base+"/v2/status", "", ""); r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("status: %d %q, want 204 and no body", r.status, r.body)
	}
	var topo struct {
		PartitionsCount int32
		Brokers         []struct {
			Partitions []struct{ Role, Health string }
		}
	}
	r := call(t, http.MethodGet, base+"/v2/topology", "", "")
	if err := json.Unmarshal(r.body, &topo); err != nil || r.ctype != "application/json" || topo.PartitionsCount != 2 || topo.Brokers[0].Partitions[0].Role != "leader" || topo.Brokers[0].Partitions[0].Health != "healthy" {
		t.Fatalf("topology %d %s %q: %v", r.status, r.ctype, r.body, err)
	}

	r = deploy(t, base, "rest.bpmn", load.Process("rest", "rest-task"))
	var dep struct {
		DeploymentKey string
		Deployments   []struct {
			ProcessDefinition struct {
				ProcessDefinitionID, ProcessDefinitionKey string
				ProcessDefinitionVersion                  int32
			}
		}
	}
	if err := json.Unmarshal(r.body, &dep); err != nil || r.status != http.StatusOK || len(dep.Deployments) != 1 || dep.Deployments[0].ProcessDefinition.ProcessDefinitionID != "rest" {
		t.Fatalf("deploy %d %q: %v", r.status, r.body, err)
	}

	// Created over REST, its job activated over REST and completed over
	// gRPC: one engine, one key space.
	r = call(t, http.MethodPost, base+"/v2/process-instances", "application/json", `{"processDefinitionId":"rest","variables":{"n":1}}`)
	var created struct{ ProcessInstanceKey, ProcessDefinitionKey string }
	if err := json.Unmarshal(r.body, &created); err != nil || r.status != http.StatusOK || created.ProcessDefinitionKey != dep.Deployments[0].ProcessDefinition.ProcessDefinitionKey {
		t.Fatalf("create %d %q: %v", r.status, r.body, err)
	}
	r = call(t, http.MethodPost, base+"/v2/jobs/activation", "application/json", `{"type":"rest-task","timeout":30000,"maxJobsToActivate":5,"worker":"w","requestTimeout":5000}`)
	var jobs struct {
		Jobs []struct {
			JobKey, ProcessInstanceKey, Worker string
			Variables                          map[string]any
			Deadline                           int64
		}
	}
	if err := json.Unmarshal(r.body, &jobs); err != nil || r.status != http.StatusOK || len(jobs.Jobs) != 1 {
		t.Fatalf("activate %d %q: %v", r.status, r.body, err)
	}
	job := jobs.Jobs[0]
	if job.ProcessInstanceKey != created.ProcessInstanceKey || job.Worker != "w" || job.Variables["n"] != 1.0 || job.Deadline < time.Now().UnixMilli() {
		t.Fatalf("job %+v: want the instance's, its variables, a deadline ahead", job)
	}
	gw := simtest.Client(t, s.Addr().String())
	key, _ := strconv.ParseInt(job.JobKey, 10, 64)
	ctx := budget.Context(t, 30*time.Second)
	if _, err := gw.NewCompleteJobCommand().JobKey(key).Send(ctx); err != nil {
		t.Fatalf("complete over gRPC a job activated over REST: %v", err)
	}
	// Created over gRPC, cancelled over REST.
	inst, err := gw.NewCreateInstanceCommand().BPMNProcessId("rest").LatestVersion().Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := call(t, http.MethodPost, base+"/v2/process-instances/"+strconv.FormatInt(inst.GetProcessInstanceKey(), 10)+"/cancellation", "", ""); r.status != http.StatusNoContent {
		t.Fatalf("cancel %d %q", r.status, r.body)
	}
	// Awaited: the answer holds the instance's end variables.
	done := make(chan reply, 1)
	go func() {
		done <- call(t, http.MethodPost, base+"/v2/process-instances", "application/json", `{"processDefinitionId":"rest","awaitCompletion":true,"requestTimeout":20000,"variables":{"n":2}}`)
	}()
	r = call(t, http.MethodPost, base+"/v2/jobs/activation", "application/json", `{"type":"rest-task","timeout":30000,"maxJobsToActivate":1}`)
	if err := json.Unmarshal(r.body, &jobs); err != nil || len(jobs.Jobs) != 1 {
		t.Fatalf("activate %d %q: %v", r.status, r.body, err)
	}
	if r := call(t, http.MethodPost, base+"/v2/jobs/"+jobs.Jobs[0].JobKey+"/completion", "application/json", `{"variables":{"done":true}}`); r.status != http.StatusNoContent {
		t.Fatalf("complete %d %q", r.status, r.body)
	}
	r = <-done
	var awaited struct{ Variables map[string]any }
	if err := json.Unmarshal(r.body, &awaited); err != nil || r.status != http.StatusOK || awaited.Variables["done"] != true || awaited.Variables["n"] != 2.0 {
		t.Fatalf("awaited %d %q: %v", r.status, r.body, err)
	}
	// The metrics move whichever protocol the work came by: three
	// instances created (two over REST, one over gRPC).
	if n := simtest.SimMetric(t, s, "zeebe_element_instance_events_total", `action="activated"`, `type="PROCESS"`); n != 3 {
		t.Errorf("process instances activated: %v, want 3", n)
	}
}

// A long poll with nothing to activate waits its requestTimeout and
// answers {"jobs":[]}; a negative one answers at once.
func TestJobActivationLongPolls(t *testing.T) {
	_, base := startREST(t, sim.Config{Partitions: 1})
	for _, tc := range []struct {
		requestTimeout int64
		least, most    time.Duration
	}{{-1, 0, budget.Of(2 * time.Second)}, {600, 500 * time.Millisecond, budget.Of(10 * time.Second)}} {
		start := time.Now()
		r := call(t, http.MethodPost, base+"/v2/jobs/activation", "application/json",
			`{"type":"nobody","timeout":1000,"maxJobsToActivate":1,"requestTimeout":`+strconv.FormatInt(tc.requestTimeout, 10)+`}`)
		took := time.Since(start)
		if r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != `{"jobs":[]}` || took < tc.least || took > tc.most {
			t.Errorf("requestTimeout %d: %d %q after %v, want 200 {\"jobs\":[]} within %v–%v", tc.requestTimeout, r.status, r.body, took, tc.least, tc.most)
		}
	}
}

// Bad input gets the answer a Camunda 8.8 gateway gives, and the
// simulator keeps serving.
func TestBadInput(t *testing.T) {
	_, base := startREST(t, sim.Config{Partitions: 1})
	for _, tc := range []struct {
		name, method, path, ctype, body string
		status                          int
		title, detail                   string
	}{
		{"malformed JSON", "POST", "/v2/process-instances", "application/json", `{"processDefinitionId":`, 400, "Bad Request", "Failed to read request"},
		{"unknown property", "POST", "/v2/jobs/1/completion", "application/json", `{"unexpectedField":123}`, 400, "Bad Request", "Request property [unexpectedField] cannot be parsed"},
		{"key as a number", "POST", "/v2/process-instances", "application/json", `{"processDefinitionKey":2251799813685249}`, 400, "Bad Request", "Request property [processDefinitionKey] cannot be parsed"},
		{"wrong type", "POST", "/v2/jobs/activation", "application/json", `{"type":1000,"timeout":1,"maxJobsToActivate":1}`, 400, "Bad Request", "Request property [type] cannot be parsed"},
		{"wrong content type", "POST", "/v2/process-instances", "text/plain", `{"processDefinitionId":"x"}`, 415, "Unsupported Media Type", "Content-Type 'text/plain' is not supported."},
		{"deployment not multipart", "POST", "/v2/deployments", "application/json", `{}`, 415, "Unsupported Media Type", "Content-Type 'application/json' is not supported."},
		{"no resources", "POST", "/v2/deployments", "multipart/form-data; boundary=x", "--x--\r\n", 400, "Bad Request", "Required part 'resources' is not present."},
		{"path key not a number", "POST", "/v2/process-instances/abc/cancellation", "", "", 400, "Bad Request", "Failed to convert 'processInstanceKey' with value: 'abc'"},
		{"neither id nor key", "POST", "/v2/process-instances", "application/json", `{}`, 400, "INVALID_ARGUMENT", "At least one of [processDefinitionId, processDefinitionKey] is required."},
		{"both id and key", "POST", "/v2/process-instances", "application/json", `{"processDefinitionId":"a","processDefinitionKey":"1"}`, 400, "INVALID_ARGUMENT", "Only one of [processDefinitionId, processDefinitionKey] is allowed."},
		{"activation without its fields", "POST", "/v2/jobs/activation", "application/json", `{}`, 400, "INVALID_ARGUMENT", "No type provided. No timeout provided. No maxJobsToActivate provided."},
		{"operationReference zero", "POST", "/v2/process-instances/1/cancellation", "application/json", `{"operationReference":0}`, 400, "INVALID_ARGUMENT", "The value for operationReference is '0' but must be > 0"},
		{"unknown process", "POST", "/v2/process-instances", "application/json", `{"processDefinitionId":"nope"}`, 404, "NOT_FOUND", "Command 'CREATE' rejected with code 'NOT_FOUND'"},
		{"unknown job", "POST", "/v2/jobs/2251799813685249/completion", "", "", 404, "NOT_FOUND", "Command 'COMPLETE' rejected with code 'NOT_FOUND': Expected to complete job with key '2251799813685249', but no such job was found"},
		{"unknown instance", "POST", "/v2/process-instances/2251799813685249/cancellation", "", "", 404, "NOT_FOUND", "Command 'CANCEL' rejected with code 'NOT_FOUND'"},
		{"job update without changes", "PATCH", "/v2/jobs/2251799813685249", "application/json", `{"changeset":{}}`, 400, "INVALID_ARGUMENT", "At least one of [retries, timeout] is required"},
		{"decisions are not simulated", "POST", "/v2/decision-definitions/evaluation", "application/json", `{"decisionDefinitionId":"d"}`, 501, "NOT_IMPLEMENTED", "EvaluateDecision is not supported"},
		{"no such endpoint", "GET", "/v2/nothing", "", "", 404, "Not Found", "No endpoint GET /v2/nothing."},
		{"body too large", "POST", "/v2/messages/publication", "application/json", `{"name":"m","correlationKey":"` + strings.Repeat("k", 5<<20) + `"}`, 413, "Payload Too Large", "Request body is larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, tc.method, base+tc.path, tc.ctype, tc.body)
			if r.status != tc.status {
				t.Fatalf("%d %q, want %d", r.status, r.body, tc.status)
			}
			title, detail := r.problem(t)
			if title != tc.title || !strings.Contains(detail, tc.detail) {
				t.Errorf("title %q detail %q, want %q containing %q", title, detail, tc.title, tc.detail)
			}
		})
	}
	if r := call(t, http.MethodGet, base+"/v2/status", "", ""); r.status != http.StatusNoContent {
		t.Fatalf("after bad input: status %d", r.status)
	}
}

// The simulator's backpressure is HTTP 503 titled RESOURCE_EXHAUSTED,
// which Camunda's SDK retries.
func TestBackpressureIs503(t *testing.T) {
	s, base := startREST(t, sim.Config{Partitions: 1, BacklogLimit: 1})
	if r := deploy(t, base, "bp.bpmn", load.Process("bp", "bp-task")); r.status != http.StatusOK {
		t.Fatalf("deploy %d %q", r.status, r.body)
	}
	s.Pause(budget.Of(10 * time.Second))
	t.Cleanup(func() { _ = s.Resume() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One command fills the partition's backlog while it is paused.
	gw := simtest.Client(t, s.Addr().String())
	go func() { _, _ = gw.NewCreateInstanceCommand().BPMNProcessId("bp").LatestVersion().Send(ctx) }()
	budget.Eventually(t, 10*time.Second, "the partition to be full", func() bool { return s.QueueLength()[0] == 1 })
	r := call(t, http.MethodPost, base+"/v2/process-instances", "application/json", `{"processDefinitionId":"bp"}`)
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("create on a full partition: %d %q, want 503", r.status, r.body)
	}
	if title, _ := r.problem(t); title != "RESOURCE_EXHAUSTED" {
		t.Fatalf("create on a full partition: title %q, want RESOURCE_EXHAUSTED", title)
	}
}

// The refuse fault takes the REST API down with the gateway, and resume
// brings it back on the same address.
func TestRefuseAndResume(t *testing.T) {
	s, base := startREST(t, sim.Config{Partitions: 1})
	s.Refuse()
	if _, err := http.Get(base + "/v2/status"); err == nil {
		t.Fatal("a refusing simulator still answered over REST")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if r := call(t, http.MethodGet, base+"/v2/status", "", ""); r.status != http.StatusNoContent {
		t.Fatalf("after resume: status %d %q, want 204", r.status, r.body)
	}
}

// TestCreatedInstanceJSON: the hand-written answer of a creation is what
// encoding/json writes (HTML characters unescaped), whatever its strings
// hold.
func TestCreatedInstanceJSON(t *testing.T) {
	business := "b-1"
	for _, c := range []restgateway.CreatedInstanceForTest{
		{ProcessDefinitionID: "order", ProcessDefinitionKey: 1 << 58, ProcessDefinitionVersion: 3, TenantID: "<default>", ProcessInstanceKey: 42, Tags: []string{}},
		{ProcessDefinitionID: `quo"te\back`, TenantID: "tenant\n\t\x01", Tags: []string{"a", "ünï", "x&y"}, Variables: restgateway.Object(`{"a": [1, {"b":null}]}`)},
		{ProcessDefinitionID: "\u2028 sep", ProcessInstanceKey: -1, BusinessID: &business, Variables: restgateway.Object(`{}`), Tags: []string{}},
	} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c); err != nil {
			t.Fatal(err)
		}
		var got, exp any
		b := restgateway.AppendCreatedForTest(c)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		_ = json.Unmarshal(want.Bytes(), &exp)
		if g, e := fmt.Sprint(got), fmt.Sprint(exp); g != e || !json.Valid(b) {
			t.Errorf("hand-written %s\nencoding/json %s", b, want.Bytes())
		}
	}
}
