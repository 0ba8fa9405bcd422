package restgateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
)

// twoWays has two conditional start events: both hold for a large order.
var twoWays = []byte(load.DefinitionsHead + `<bpmn:process id="big" isExecutable="true">
<bpmn:startEvent id="big-order"><bpmn:conditionalEventDefinition><bpmn:condition>= amount &gt; 100</bpmn:condition></bpmn:conditionalEventDefinition></bpmn:startEvent>
<bpmn:startEvent id="huge-order"><bpmn:conditionalEventDefinition><bpmn:condition>= amount &gt; 1000</bpmn:condition></bpmn:conditionalEventDefinition></bpmn:startEvent>
<bpmn:endEvent id="done"/><bpmn:sequenceFlow id="f1" sourceRef="big-order" targetRef="done"/><bpmn:sequenceFlow id="f2" sourceRef="huge-order" targetRef="done"/>
</bpmn:process></bpmn:definitions>`)

// POST /v2/conditionals/evaluation (8.9): one instance per conditional
// start event that holds, their keys as strings; the request's faults as
// Camunda words them; a version without it answers 501.
func TestConditionalEvaluation(t *testing.T) {
	_, base := startREST(t, sim.Config{Partitions: 2})
	if r := deploy(t, base, "big.bpmn", twoWays); r.status != http.StatusOK {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	url := base + "/v2/conditionals/evaluation"
	for _, tc := range []struct {
		body      string
		instances int
	}{{`{"variables":{"amount":5000}}`, 2}, {`{"variables":{"amount":500}}`, 1}, {`{"variables":{"amount":5}}`, 0}} {
		r := call(t, http.MethodPost, url, "application/json", tc.body)
		var out struct {
			ProcessInstances []struct{ ProcessDefinitionKey, ProcessInstanceKey string }
		}
		if err := json.Unmarshal(r.body, &out); err != nil || r.status != http.StatusOK || out.ProcessInstances == nil || len(out.ProcessInstances) != tc.instances {
			t.Errorf("%s: %d %s, want %d instances", tc.body, r.status, r.body, tc.instances)
			continue
		}
		for _, p := range out.ProcessInstances {
			if p.ProcessDefinitionKey == "" || p.ProcessInstanceKey == "" {
				t.Errorf("%s: keys %+v", tc.body, p)
			}
		}
	}
	for _, tc := range []struct {
		body, title, detail string
		status              int
	}{
		{`{}`, "INVALID_ARGUMENT", "No variables provided.", http.StatusBadRequest},
		{`{"variables":{},"amount":1}`, "Bad Request", "Request property [amount] cannot be parsed: unknown property", http.StatusBadRequest},
		{`{"variables":[1]}`, "Bad Request", "", http.StatusBadRequest},
		{`{"variables":{},"processDefinitionKey":"2251799813999999"}`, "NOT_FOUND", "", http.StatusNotFound},
	} {
		r := call(t, http.MethodPost, url, "application/json", tc.body)
		title, detail := r.problem(t)
		if r.status != tc.status || title != tc.title || (tc.detail != "" && detail != tc.detail) {
			t.Errorf("%s: %d %s %q, want %d %s %q", tc.body, r.status, title, detail, tc.status, tc.title, tc.detail)
		}
	}

	v88, _ := sim.ParseVersion("8.8")
	_, old := startREST(t, sim.Config{Partitions: 1, Version: v88})
	if r := call(t, http.MethodPost, old+"/v2/conditionals/evaluation", "application/json", `{"variables":{}}`); r.status != http.StatusNotImplemented {
		t.Errorf("on 8.8: %d %s, want 501", r.status, r.body)
	}
}
