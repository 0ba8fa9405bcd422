package proxy

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/shardctl/shardctl/internal/restgateway/sdktest"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// ownKeys are the keys of every item of resource the shards hold, asked
// of each shard itself, in the federation's form.
func ownKeys(t *testing.T, shards []*sim.Sim, resource, key, filter string) []string {
	t.Helper()
	var out []string
	for _, it := range shardItems(t, shards, resource, `{"filter":`+filter+`,"page":{"limit":10000}}`) {
		out = append(out, it[key].(string))
	}
	slices.Sort(out)
	return out
}

// listedKeys reads the keys of c8ctl's JSON list.
func listedKeys(t *testing.T, out []byte) []string {
	t.Helper()
	var rows []struct{ Key string }
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("c8ctl's list %q: %v", out, err)
	}
	var keys []string
	for _, r := range rows {
		keys = append(keys, r.Key)
	}
	slices.Sort(keys)
	return keys
}

// TestSearchClientsSeeTheFederation: Camunda's CLI (c8ctl) and SDK list
// and get process instances, jobs and incidents through the proxy over
// three simulators and see the whole federation: every shard's items,
// once each, over several pages (c8ctl pages 100 at a time by cursor,
// the SDK here 7), with keys that work in every other call.
func TestSearchClientsSeeTheFederation(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 2, RESTListen: "127.0.0.1:0"})
	_, base := startRESTProxy(t, shards)
	c8 := sdktest.NewC8ctl(t, base)
	o := c8.Workload(t, 4, func(instance, job string) string {
		// The operator finds the incident by its instance, as in Operate.
		r := postSearch(t, base, "incidents", `{"filter":{"processInstanceKey":"`+instance+`","state":"ACTIVE"}}`)
		if len(r.Items) != 1 || r.Items[0]["jobKey"] != job {
			t.Fatalf("incidents of %s: %s, want the one of job %s", instance, r.body, job)
		}
		return r.Items[0]["incidentKey"].(string)
	})
	sdk := sdktest.New(t, base)
	active := sdk.Create(t, 110) // no worker: they wait, on every shard

	instances := ownKeys(t, shards, "process-instances", "processInstanceKey", `{}`)
	activeKeys := ownKeys(t, shards, "process-instances", "processInstanceKey", `{"state":"ACTIVE"}`)
	jobs := ownKeys(t, shards, "jobs", "jobKey", `{}`)
	incidents := ownKeys(t, shards, "incidents", "incidentKey", `{}`)
	slots := map[int]bool{}
	for _, k := range instances {
		slots[slotOf(t, k)] = true
	}
	if len(instances) < 110+8 || len(slots) != 3 || len(incidents) != 1 || !slices.Contains(activeKeys, active[0]) {
		t.Fatalf("the shards hold %d instances on slots %v, %d incidents: want over 118 on all three, one incident", len(instances), slots, len(incidents))
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"list", "pi", "--all"}, instances},
		{[]string{"list", "pi"}, activeKeys}, // c8ctl lists the active ones unless --all
		{[]string{"list", "jobs"}, jobs},
		{[]string{"list", "inc"}, incidents},
	} {
		out, _ := c8.MustRun(t, tc.args...)
		if got := listedKeys(t, out); !slices.Equal(got, tc.want) {
			t.Errorf("c8ctl %v: %d keys, want the %d of every shard\n got  %v\n want %v", tc.args, len(got), len(tc.want), got, tc.want)
		}
	}
	for _, k := range []string{o.Instances[0], o.Failing, active[len(active)-1]} {
		out, _ := c8.MustRun(t, "get", "pi", k)
		var pi map[string]any
		if err := json.Unmarshal(out, &pi); err != nil || pi["processInstanceKey"] != k {
			t.Errorf("c8ctl get pi %s: %s (%v)", k, out, err)
		}
	}
	out, _ := c8.MustRun(t, "get", "inc", incidents[0])
	var inc map[string]any
	if err := json.Unmarshal(out, &inc); err != nil || inc["incidentKey"] != incidents[0] || inc["state"] != "RESOLVED" || inc["processInstanceKey"] != o.Failing {
		t.Errorf("c8ctl get inc %s: %s (%v)", incidents[0], out, err)
	}

	var listed struct{ Instances, Jobs, Incidents, Got []string }
	if err := json.Unmarshal(sdk.Run(t, "list", "7"), &listed); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ got, want []string }{
		"instances": {listed.Instances, instances}, "jobs": {listed.Jobs, jobs}, "incidents": {listed.Incidents, incidents},
	} {
		got := slices.Sorted(slices.Values(tc.got))
		if !slices.Equal(got, tc.want) {
			t.Errorf("the SDK's %s, 7 a page: %d, want the %d of every shard once\n got  %v\n want %v", name, len(got), len(tc.want), got, tc.want)
		}
	}
	if want := append(slices.Clone(listed.Instances[:3]), listed.Incidents...); !slices.Equal(listed.Got, want) {
		t.Errorf("the SDK's gets: %v, want %v", listed.Got, want)
	}
}
