package restgateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
)

type searchPage struct {
	Items []map[string]any
	Page  struct {
		TotalItems             int64
		HasMoreTotalItems      bool
		StartCursor, EndCursor *string
	}
}

func searchCall(t *testing.T, base, resource, body string) searchPage {
	t.Helper()
	r := call(t, http.MethodPost, base+"/v2/"+resource+"/search", "application/json", body)
	var p searchPage
	if err := json.Unmarshal(r.body, &p); err != nil || r.status != http.StatusOK {
		t.Fatalf("search %s %s: %d %q: %v", resource, body, r.status, r.body, err)
	}
	return p
}

// waitFor polls a search until it has want items: the simulator exports
// as it processes, and a command's answer may come before its record is
// processed to its end.
func waitFor(t *testing.T, base, resource, body string, want int) searchPage {
	t.Helper()
	ctx := budget.Context(t, 20*time.Second)
	for {
		p := searchCall(t, base, resource, body)
		if len(p.Items) == want {
			return p
		}
		select {
		case <-ctx.Done():
			t.Fatalf("search %s %s: %d items, want %d: %+v", resource, body, len(p.Items), want, p.Items)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestQueriesOverREST(t *testing.T) {
	_, base := startREST(t, sim.Config{Partitions: 2})
	if r := deploy(t, base, "q.bpmn", load.Process("q", "q-task")); r.status != http.StatusOK {
		t.Fatalf("deploy %d %q", r.status, r.body)
	}
	var keys []string
	for i := range 6 {
		r := call(t, http.MethodPost, base+"/v2/process-instances", "application/json", fmt.Sprintf(`{"processDefinitionId":"q","variables":{"n":%d}}`, i))
		var c struct{ ProcessInstanceKey string }
		if err := json.Unmarshal(r.body, &c); err != nil || r.status != http.StatusOK {
			t.Fatalf("create %d %q", r.status, r.body)
		}
		keys = append(keys, c.ProcessInstanceKey)
	}
	// Work three jobs: complete two, fail one to an incident.
	r := call(t, http.MethodPost, base+"/v2/jobs/activation", "application/json", `{"type":"q-task","timeout":60000,"maxJobsToActivate":3,"worker":"w1","requestTimeout":5000}`)
	var act struct {
		Jobs []struct{ JobKey, ProcessInstanceKey string }
	}
	if err := json.Unmarshal(r.body, &act); err != nil || len(act.Jobs) != 3 {
		t.Fatalf("activate %d %q: %v", r.status, r.body, err)
	}
	for _, j := range act.Jobs[:2] {
		if r := call(t, http.MethodPost, base+"/v2/jobs/"+j.JobKey+"/completion", "application/json", `{}`); r.status != http.StatusNoContent {
			t.Fatalf("complete %d %q", r.status, r.body)
		}
	}
	failed := act.Jobs[2]
	if r := call(t, http.MethodPost, base+"/v2/jobs/"+failed.JobKey+"/failure", "application/json", `{"retries":0,"errorMessage":"boom"}`); r.status != http.StatusNoContent {
		t.Fatalf("fail %d %q", r.status, r.body)
	}

	completed := waitFor(t, base, "process-instances", `{"filter":{"state":"COMPLETED"}}`, 2)
	if completed.Page.TotalItems != 2 || completed.Items[0]["endDate"] == nil || completed.Items[0]["processDefinitionId"] != "q" {
		t.Errorf("completed instances: %+v", completed)
	}
	withIncident := waitFor(t, base, "process-instances", `{"filter":{"state":"ACTIVE","hasIncident":true}}`, 1)
	if withIncident.Items[0]["processInstanceKey"] != failed.ProcessInstanceKey {
		t.Errorf("the instance with an incident: %+v, want %s", withIncident.Items, failed.ProcessInstanceKey)
	}
	inc := waitFor(t, base, "incidents", `{"filter":{"processInstanceKey":"`+failed.ProcessInstanceKey+`"}}`, 1).Items[0]
	if inc["errorType"] != "JOB_NO_RETRIES" || inc["errorMessage"] != "boom" || inc["jobKey"] != failed.JobKey || inc["state"] != "ACTIVE" || inc["elementId"] != "t1" {
		t.Errorf("incident %v", inc)
	}
	// Where the instances wait: four at the task with no incident, one
	// with it; the two completed left theirs.
	waiting := waitFor(t, base, "element-instances", `{"filter":{"state":"ACTIVE","type":"SERVICE_TASK"},"sort":[{"field":"hasIncident","order":"DESC"}]}`, 4)
	if el := waiting.Items[0]; el["processInstanceKey"] != failed.ProcessInstanceKey || el["elementId"] != "t1" || el["hasIncident"] != true || el["incidentKey"] != inc["incidentKey"] {
		t.Errorf("the element held by the incident: %v", el)
	}
	if done := searchCall(t, base, "element-instances", `{"filter":{"state":"COMPLETED"}}`); done.Page.TotalItems != 2 || done.Items[0]["endDate"] == nil {
		t.Errorf("completed elements: %+v", done)
	}
	jobs := waitFor(t, base, "jobs", `{"filter":{"type":"q-task","state":{"$in":["CREATED"]},"worker":""},"sort":[{"field":"processInstanceKey","order":"DESC"}]}`, 3)
	var jobInstances []string
	for _, j := range jobs.Items {
		jobInstances = append(jobInstances, j["processInstanceKey"].(string))
	}
	if !slices.IsSortedFunc(jobInstances, func(a, b string) int { return -compareKeys(a, b) }) {
		t.Errorf("jobs not in processInstanceKey DESC order: %v", jobInstances)
	}
	vars := waitFor(t, base, "variables", `{"filter":{"processInstanceKey":"`+keys[4]+`"}}`, 1).Items[0]
	if vars["name"] != "n" || vars["value"] != "4" || vars["scopeKey"] != keys[4] {
		t.Errorf("variable %v", vars)
	}
	defs := searchCall(t, base, "process-definitions", `{"filter":{"processDefinitionId":"q","isLatestVersion":true}}`)
	if len(defs.Items) != 1 || defs.Items[0]["version"] != 1.0 || defs.Items[0]["isLatestVersion"] != nil {
		t.Errorf("definitions %+v", defs)
	}

	// Paging by cursor, forwards and back, over every instance.
	var walked []string
	after := ""
	for range 10 {
		body := `{"sort":[{"field":"state"}],"page":{"limit":2}}`
		if after != "" {
			body = `{"sort":[{"field":"state"}],"page":{"limit":2,"after":"` + after + `"}}`
		}
		p := searchCall(t, base, "process-instances", body)
		if p.Page.TotalItems != 6 {
			t.Fatalf("total %d, want 6", p.Page.TotalItems)
		}
		if len(p.Items) == 0 {
			if p.Page.EndCursor != nil || p.Page.StartCursor != nil {
				t.Errorf("an empty page has cursors: %+v", p.Page)
			}
			break
		}
		for _, it := range p.Items {
			walked = append(walked, it["processInstanceKey"].(string))
		}
		after = *p.Page.EndCursor
	}
	if len(walked) != 6 || len(slices.Compact(slices.Sorted(slices.Values(walked)))) != 6 {
		t.Errorf("walked %v, want the 6 instances once each", walked)
	}
	back := searchCall(t, base, "process-instances", `{"sort":[{"field":"state"}],"page":{"limit":2,"before":"`+after+`"}}`)
	if len(back.Items) != 2 || back.Items[0]["processInstanceKey"] != walked[3] || back.Items[1]["processInstanceKey"] != walked[4] {
		t.Errorf("the page before the last item: %+v, want %v", back.Items, walked[3:5])
	}

	// Gets by key, and the 404 of a key nothing holds.
	r = call(t, http.MethodGet, base+"/v2/process-instances/"+keys[0], "", "")
	var pi map[string]any
	if err := json.Unmarshal(r.body, &pi); err != nil || r.status != http.StatusOK || pi["processInstanceKey"] != keys[0] {
		t.Errorf("get %d %q", r.status, r.body)
	}
	if r = call(t, http.MethodGet, base+"/v2/incidents/"+inc["incidentKey"].(string), "", ""); r.status != http.StatusOK {
		t.Errorf("get incident %d %q", r.status, r.body)
	}
	for _, tt := range []struct {
		path, title, detail string
		status              int
	}{
		{"/v2/process-instances/2251799813685999", "NOT_FOUND", "Process Instance with key '2251799813685999' not found", 404},
		{"/v2/variables/1", "NOT_FOUND", "Variable with key '1' not found", 404},
		{"/v2/process-definitions/7", "NOT_FOUND", "Process Definition with key '7' not found", 404},
		{"/v2/incidents/abc", "Bad Request", "Failed to convert 'key' with value: 'abc'", 400},
	} {
		r := call(t, http.MethodGet, base+tt.path, "", "")
		if title, detail := r.problem(t); r.status != tt.status || title != tt.title || detail != tt.detail {
			t.Errorf("GET %s: %d %s %q, want %d %s %q", tt.path, r.status, title, detail, tt.status, tt.title, tt.detail)
		}
	}
	for _, tt := range []struct {
		ctype, body, title string
		status             int
	}{
		{"application/json", `{"page":{"after":"WzFd","before":"WzFd"}}`, "INVALID_ARGUMENT", 400},
		{"text/plain", `{}`, "Unsupported Media Type", 415},
		{"application/json", `{"filter":`, "Bad Request", 400},
		{"application/json", `{"sort":[{"field":"colour"}]}`, "INVALID_ARGUMENT", 400},
	} {
		r := call(t, http.MethodPost, base+"/v2/process-instances/search", tt.ctype, tt.body)
		if title, _ := r.problem(t); r.status != tt.status || title != tt.title {
			t.Errorf("search %s %q: %d %s, want %d %s", tt.ctype, tt.body, r.status, title, tt.status, tt.title)
		}
	}
	// An empty body is the first page of everything.
	if p := searchCall(t, base, "process-instances", ``); p.Page.TotalItems != 6 {
		t.Errorf("an empty search: %+v", p.Page)
	}
}

func compareKeys(a, b string) int {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	return int(x - y)
}

// TestQueryHistoryBounds: ended instances beyond the history are
// forgotten, oldest first; active ones stay.
func TestQueryHistoryBounds(t *testing.T) {
	_, base := startREST(t, sim.Config{Partitions: 1, QueryHistory: 5})
	if r := deploy(t, base, "h.bpmn", load.Process("h")); r.status != http.StatusOK {
		t.Fatalf("deploy %d %q", r.status, r.body)
	}
	for range 12 {
		if r := call(t, http.MethodPost, base+"/v2/process-instances", "application/json", `{"processDefinitionId":"h"}`); r.status != http.StatusOK {
			t.Fatalf("create %d %q", r.status, r.body)
		}
	}
	p := waitFor(t, base, "process-instances", `{"sort":[{"field":"processInstanceKey","order":"DESC"}]}`, 5)
	if p.Page.TotalItems != 5 {
		t.Errorf("kept %d ended instances, want 5", p.Page.TotalItems)
	}
}
