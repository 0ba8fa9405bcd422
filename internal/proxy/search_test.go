package proxy

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/restgateway"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// searchReply is one answer of a search, as JSON.
type searchReply struct {
	Items []map[string]any `json:"items"`
	Page  struct {
		TotalItems             int64
		StartCursor, EndCursor *string
	} `json:"page"`
	status  int
	partial string
	body    string
}

func postSearch(t *testing.T, base, resource, body string) searchReply {
	t.Helper()
	req, err := http.NewRequestWithContext(budget.Context(t, 30*time.Second), http.MethodPost, base+"/v2/"+resource+"/search", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r searchReply
	b, _ := io.ReadAll(resp.Body)
	r.status, r.partial, r.body = resp.StatusCode, resp.Header.Get(restgateway.PartialHeader), string(b)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("search %s %s: %q: %v", resource, body, b, err)
		}
	}
	return r
}

// searchKinds says how the test compares a field, independently of the
// search package: keys as numbers, dates as instants.
func compareField(name string, a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	switch {
	case strings.HasSuffix(name, "Key"):
		x, _ := strconv.ParseInt(a.(string), 10, 64)
		y, _ := strconv.ParseInt(b.(string), 10, 64)
		return cmp.Compare(x, y)
	case slices.Contains([]string{"startDate", "endDate", "deadline", "creationTime", "endTime"}, name):
		x, _ := time.Parse(time.RFC3339Nano, a.(string))
		y, _ := time.Parse(time.RFC3339Nano, b.(string))
		return cmp.Compare(x.UnixMilli(), y.UnixMilli())
	}
	switch x := a.(type) {
	case float64:
		return cmp.Compare(x, b.(float64))
	case bool:
		return cmp.Compare(boolInt(x), boolInt(b.(bool)))
	}
	return strings.Compare(a.(string), b.(string))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

type sortSpec struct {
	field string
	desc  bool
}

// itemOrder is Camunda's order, written out here apart from the code
// under test: the sort fields, absent values last, then the key.
func itemOrder(sorts []sortSpec, key string) func(a, b map[string]any) int {
	return func(a, b map[string]any) int {
		for _, s := range sorts {
			av, bv := a[s.field], b[s.field]
			c := compareField(s.field, av, bv)
			if s.desc && av != nil && bv != nil {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		return compareField(key, a[key], b[key])
	}
}

// searchCase is a resource with the filters and sorts the property test
// draws from.
type searchCase struct {
	resource, key string
	filters       [][]string // at most one of each
	sorts         []string
}

var searchCases = []searchCase{
	{"process-instances", "processInstanceKey",
		[][]string{{`"state":"ACTIVE"`, `"state":{"$in":["COMPLETED","TERMINATED"]}`}, {`"processDefinitionId":{"$like":"s*"}`, `"processDefinitionId":"other"`}, {`"hasIncident":true`}, {`"endDate":{"$exists":true}`}},
		[]string{"state", "startDate", "endDate", "processDefinitionId", "processInstanceKey", "hasIncident", "processDefinitionKey"}},
	{"jobs", "jobKey",
		[][]string{{`"state":"CREATED"`, `"state":{"$neq":"COMPLETED"}`}, {`"worker":"w-1"`, `"worker":{"$in":["w-2",""]}`}, {`"retries":{"$gte":1}`}, {`"type":"s-task"`}},
		[]string{"state", "worker", "retries", "processInstanceKey", "elementInstanceKey", "deadline", "type"}},
	{"incidents", "incidentKey",
		[][]string{{`"state":"ACTIVE"`}, {`"errorType":"JOB_NO_RETRIES"`}, {`"errorMessage":{"$like":"*w-2"}`}},
		[]string{"creationTime", "processInstanceKey", "state", "errorMessage"}},
	{"variables", "variableKey",
		[][]string{{`"name":"n"`, `"name":{"$in":["n","m"]}`}, {`"value":{"$neq":"\"v1\""}`}},
		[]string{"name", "value", "processInstanceKey", "scopeKey"}},
}

// TestFederatedSearchWalks is the property of issue 37: random data over
// three simulators, random filters, sorts and page sizes; walking every
// page through the proxy, forwards and backwards, yields exactly the
// items of the shards' own answers, each once, in order; also with a
// shard drained and a shard added between pages.
func TestFederatedSearchWalks(t *testing.T) {
	shards := simtest.StartN(t, 4, sim.Config{Partitions: 2, RESTListen: "127.0.0.1:0"})
	cfgs := simtest.ShardConfigs(shards)
	p := startProxy(t, Config{Shards: cfgs[:3], RESTListen: "127.0.0.1:0"})
	base := "http://" + p.RESTAddr().String()
	rng := rand.New(rand.NewPCG(7, 37))
	seedSearchData(t, rng, base, "http://"+shards[3].RESTAddr().String())

	members := 3
	join, drain := 4, 1 // the rounds whose walks change the federation
	for round := range 24 {
		c := searchCases[round%len(searchCases)]
		var filters []string
		for _, f := range c.filters {
			if rng.IntN(3) == 0 {
				filters = append(filters, f[rng.IntN(len(f))])
			}
		}
		var sorts []sortSpec
		var sortJSON []string
		for range rng.IntN(3) {
			s := sortSpec{c.sorts[rng.IntN(len(c.sorts))], rng.IntN(2) == 0}
			sorts = append(sorts, s)
			order := "ASC"
			if s.desc {
				order = "DESC"
			}
			sortJSON = append(sortJSON, fmt.Sprintf(`{"field":%q,"order":%q}`, s.field, order))
		}
		limit := 1 + rng.IntN(25)
		query := fmt.Sprintf(`"filter":{%s},"sort":[%s]`, strings.Join(filters, ","), strings.Join(sortJSON, ","))
		order := itemOrder(sorts, c.key)
		name := fmt.Sprintf("round %d: %s {%s} limit %d", round, c.resource, query, limit)

		// The shards' own answers, their keys as the proxy gives them.
		own := func(n int) []map[string]any {
			return shardItems(t, shards[:n], c.resource, `{`+query+`,"page":{"limit":10000}}`)
		}
		want := own(members)
		var got []map[string]any
		var joinedAt map[string]any
		after := ""
		for page := 0; ; page++ {
			if page > len(want)+30 {
				t.Fatalf("%s: the walk does not end", name)
			}
			body := fmt.Sprintf(`{%s,"page":{"limit":%d}}`, query, limit)
			if after != "" {
				body = fmt.Sprintf(`{%s,"page":{"limit":%d,"after":%q}}`, query, limit, after)
			}
			r := postSearch(t, base, c.resource, body)
			if r.status != http.StatusOK {
				t.Fatalf("%s: page %d: %d %s", name, page, r.status, r.body)
			}
			if len(r.Items) > limit {
				t.Fatalf("%s: page %d has %d items, over the limit", name, page, len(r.Items))
			}
			if len(r.Items) == 0 {
				break
			}
			got = append(got, r.Items...)
			after = *r.Page.EndCursor
			switch {
			case round == drain && page == 0:
				if err := p.SetState("shard-2", proxyapi.Draining); err != nil {
					t.Fatal(err)
				}
			case round == join && page == 0:
				if err := p.AddShard(budget.Context(t, 30*time.Second), cfgs[3], true); err != nil {
					t.Fatal(err)
				}
				members, joinedAt = 4, r.Items[len(r.Items)-1]
			}
		}
		if joinedAt != nil {
			// The shard that joined shows what sorts after the page the
			// client had when it joined: a cursor is a position.
			for _, it := range own(4)[len(want):] {
				if order(it, joinedAt) > 0 {
					want = append(want, it)
				}
			}
		}
		slices.SortFunc(want, order)
		if keys(got, c.key) != keys(want, c.key) {
			t.Fatalf("%s:\n got  %s\n want %s", name, keys(got, c.key), keys(want, c.key))
		}
		if !slices.IsSortedFunc(got, order) {
			t.Fatalf("%s: pages out of order: %s", name, keys(got, c.key))
		}
		t.Logf("%s: %d items", name, len(got))
		if len(want) == 0 {
			continue
		}
		// Backwards from the last item: the same items, in order.
		back := []map[string]any{want[len(want)-1]}
		before := after
		for page := 0; page <= len(want)+1; page++ {
			r := postSearch(t, base, c.resource, fmt.Sprintf(`{%s,"page":{"limit":%d,"before":%q}}`, query, limit, before))
			if r.status != http.StatusOK || len(r.Items) == 0 {
				break
			}
			back = append(slices.Clone(r.Items), back...)
			before = *r.Page.StartCursor
		}
		if joinedAt == nil && keys(back, c.key) != keys(want, c.key) {
			t.Fatalf("%s: backwards\n got  %s\n want %s", name, keys(back, c.key), keys(want, c.key))
		}
		// The first page by offset, and its total.
		r := postSearch(t, base, c.resource, fmt.Sprintf(`{%s,"page":{"from":0,"limit":%d}}`, query, limit))
		all := own(members)
		slices.SortFunc(all, order)
		if r.Page.TotalItems != int64(len(all)) || keys(r.Items, c.key) != keys(all[:min(limit, len(all))], c.key) {
			t.Fatalf("%s: offset page %s total %d, want %s total %d", name, keys(r.Items, c.key), r.Page.TotalItems, keys(all[:min(limit, len(all))], c.key), len(all))
		}
	}
}

// deployREST deploys one BPMN file as Camunda's clients do.
func deployREST(t *testing.T, base, name string, bpmn []byte) {
	t.Helper()
	if err := load.REST(base, http.DefaultClient).Deploy(budget.Context(t, 30*time.Second), name, bpmn); err != nil {
		t.Fatalf("deploy %s: %v", name, err)
	}
}

func keys(items []map[string]any, key string) string {
	var b strings.Builder
	for _, it := range items {
		b.WriteString(fmt.Sprint(it[key]))
		b.WriteByte(' ')
	}
	return b.String()
}

// seedSearchData spreads work over the federation through the proxy —
// instances, finished, failed to incidents, cancelled, and jobs held by
// workers — and some straight into the simulator that joins later.
func seedSearchData(t *testing.T, rng *rand.Rand, base, late string) {
	t.Helper()
	for _, b := range []string{base, late} {
		deployREST(t, b, "s.bpmn", load.Process("s", "s-task"))
		deployREST(t, b, "other.bpmn", load.Process("other", "o-task"))
	}
	var instances []string
	create := func(base, proc string, n int) {
		for i := range n {
			r := restCall(t, http.MethodPost, base+"/v2/process-instances", "application/json", fmt.Appendf(nil, `{"processDefinitionId":%q,"variables":{"n":%d,"m":"v%d"}}`, proc, rng.IntN(5), i%3))
			var c struct{ ProcessInstanceKey string }
			if err := json.Unmarshal(r.body, &c); err != nil || r.status != http.StatusOK {
				t.Fatalf("create %d %s", r.status, r.body)
			}
			instances = append(instances, c.ProcessInstanceKey)
		}
	}
	create(base, "s", 45)
	create(base, "other", 15)
	create(late, "s", 12)
	for i, w := range []string{"w-1", "w-2"} {
		r := restCall(t, http.MethodPost, base+"/v2/jobs/activation", "application/json", fmt.Appendf(nil, `{"type":"s-task","timeout":600000,"maxJobsToActivate":%d,"worker":%q,"requestTimeout":2000}`, 12+i*4, w))
		var act struct{ Jobs []struct{ JobKey string } }
		if err := json.Unmarshal(r.body, &act); err != nil {
			t.Fatalf("activate %d %s", r.status, r.body)
		}
		for j, job := range act.Jobs {
			switch j % 4 {
			case 0:
				restCall(t, http.MethodPost, base+"/v2/jobs/"+job.JobKey+"/completion", "application/json", []byte(`{}`))
			case 1:
				restCall(t, http.MethodPost, base+"/v2/jobs/"+job.JobKey+"/failure", "application/json", []byte(`{"retries":0,"errorMessage":"boom `+w+`"}`))
			case 2:
				restCall(t, http.MethodPost, base+"/v2/jobs/"+job.JobKey+"/failure", "application/json", []byte(`{"retries":2,"retryBackOff":600000}`))
			}
		}
	}
	for _, k := range instances[50:56] {
		cancelOverREST(t, base, k)
	}
}

// shardItems are the answers of each shard (shard-1, shard-2…, slots 1,
// 2…) to a search asked of the shard itself, their keys in the
// federation's form.
func shardItems(t *testing.T, shards []*sim.Sim, resource, body string) []map[string]any {
	t.Helper()
	var all []map[string]any
	for i, s := range shards {
		r := postSearch(t, "http://"+s.RESTAddr().String(), resource, body)
		if r.status != http.StatusOK {
			t.Fatalf("shard-%d's %s %s: %d %s", i+1, resource, body, r.status, r.body)
		}
		for _, it := range r.Items {
			for k, v := range it {
				if s, ok := v.(string); ok && strings.HasSuffix(k, "Key") {
					raw, _ := strconv.ParseInt(s, 10, 64)
					it[k] = strconv.FormatInt(keyslot.With(raw, i+1), 10)
				}
			}
		}
		all = append(all, r.Items...)
	}
	return all
}

func getREST(t *testing.T, url string) restReply {
	t.Helper()
	return restCall(t, http.MethodGet, url, "", nil)
}

// TestFederatedSearchWithAShardDown: a shard that cannot answer fails a
// search with 503 naming it, unless the proxy answers partial results,
// marked and counted; a key filter or a get that needs only other shards
// is answered; a shard without a REST address is named as such.
func TestFederatedSearchWithAShardDown(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 1, RESTListen: "127.0.0.1:0"})
	cfgs := simtest.ShardConfigs(shards)
	strict := startProxy(t, Config{Shards: cfgs, RESTListen: "127.0.0.1:0"})
	partial := startProxy(t, Config{Shards: cfgs, RESTListen: "127.0.0.1:0", SearchPartial: true, SearchTimeout: 2 * time.Second})
	base, pbase := "http://"+strict.RESTAddr().String(), "http://"+partial.RESTAddr().String()
	deployREST(t, base, "d.bpmn", load.Process("d", "d-task"))
	bySlot := map[int][]string{}
	for range 12 {
		r := restCall(t, http.MethodPost, base+"/v2/process-instances", "application/json", []byte(`{"processDefinitionId":"d"}`))
		var c struct{ ProcessInstanceKey string }
		if err := json.Unmarshal(r.body, &c); err != nil || r.status != http.StatusOK {
			t.Fatalf("create %d %s", r.status, r.body)
		}
		bySlot[slotOf(t, c.ProcessInstanceKey)] = append(bySlot[slotOf(t, c.ProcessInstanceKey)], c.ProcessInstanceKey)
	}
	if len(bySlot[1]) == 0 || len(bySlot[2]) == 0 || len(bySlot[3]) == 0 {
		t.Fatalf("instances by slot %v: want some on every shard", bySlot)
	}
	first := postSearch(t, base, "process-instances", `{"page":{"limit":4}}`)
	if first.status != http.StatusOK || first.Page.TotalItems != 12 || len(first.Items) != 4 {
		t.Fatalf("first page: %d %s", first.status, first.body)
	}

	shards[1].Refuse() // shard-2 is gone mid-walk
	defer func() { _ = shards[1].Resume() }()
	next := fmt.Sprintf(`{"page":{"limit":4,"after":%q}}`, *first.Page.EndCursor)
	r := postSearch(t, base, "process-instances", next)
	var prob struct{ Title, Detail string }
	_ = json.Unmarshal([]byte(r.body), &prob)
	if r.status != http.StatusServiceUnavailable || prob.Title != "UNAVAILABLE" || !strings.Contains(prob.Detail, "shard shard-2 did not answer") || strings.Contains(prob.Detail, "shard-1") {
		t.Errorf("with shard-2 down: %d %s, want 503 naming shard-2 alone", r.status, r.body)
	}
	r = postSearch(t, pbase, "process-instances", next)
	if r.status != http.StatusOK || r.partial != "missing=shard-2" || r.Page.TotalItems != int64(len(bySlot[1])+len(bySlot[3])) {
		t.Errorf("partial answer: %d %q %s, want 200 marked missing=shard-2 with the total of shards 1 and 3", r.status, r.partial, r.body)
	}
	for _, it := range r.Items {
		if slotOf(t, it["processInstanceKey"].(string)) == 2 {
			t.Errorf("a partial answer holds shard-2's %v", it)
		}
	}
	if n := proxyMetric(t, partial, "shardctl_proxy_search_partial_total", `shard="shard-2"`); n != 1 {
		t.Errorf("partial answers counted %v, want 1", n)
	}
	if n := proxyMetric(t, strict, "shardctl_proxy_searches_total", `resource="process-instances"`, `outcome="unavailable"`); n != 1 {
		t.Errorf("unavailable searches counted %v, want 1", n)
	}

	// A key filter of shard-3 needs shard-3 alone; a get of its key too.
	k3 := bySlot[3][0]
	r = postSearch(t, base, "process-instances", fmt.Sprintf(`{"filter":{"processInstanceKey":{"$in":[%q,%q]}}}`, k3, bySlot[1][0]))
	if r.status != http.StatusOK || r.Page.TotalItems != 2 {
		t.Errorf("search by keys of shards 1 and 3 with shard-2 down: %d %s", r.status, r.body)
	}
	g := getREST(t, base+"/v2/process-instances/"+k3)
	var pi map[string]any
	if err := json.Unmarshal(g.body, &pi); err != nil || g.status != http.StatusOK || pi["processInstanceKey"] != k3 || slotOf(t, pi["processDefinitionKey"].(string)) != 3 {
		t.Errorf("get %s: %d %s", k3, g.status, g.body)
	}
	g = getREST(t, base+"/v2/process-instances/"+bySlot[2][0])
	if g.status != http.StatusServiceUnavailable || !strings.Contains(string(g.body), "Shard shard-2 holds Process Instance") {
		t.Errorf("get of shard-2's key: %d %s", g.status, g.body)
	}
	unknown := strconv.FormatInt(keyslot.With(2251799813685249, 9), 10)
	g = getREST(t, base+"/v2/process-instances/"+unknown)
	if g.status != http.StatusNotFound || !strings.Contains(string(g.body), "Process Instance with key '"+unknown+"' not found") {
		t.Errorf("get of a key of no shard: %d %s", g.status, g.body)
	}
	// The shard's own 404 names the federation's key, not the shard's.
	gone := strconv.FormatInt(keyslot.With(2251799813685999, 1), 10)
	g = getREST(t, base+"/v2/process-instances/"+gone)
	if g.status != http.StatusNotFound || !strings.Contains(string(g.body), "key '"+gone+"' not found") {
		t.Errorf("get of a key shard-1 does not hold: %d %s", g.status, g.body)
	}

	// A shard the proxy knows no REST address of is named as such.
	noREST := cfgs[2]
	noREST.REST = ""
	p := startProxy(t, Config{Shards: []proxyapi.ShardConfig{cfgs[0], noREST}, RESTListen: "127.0.0.1:0"})
	r = postSearch(t, "http://"+p.RESTAddr().String(), "jobs", `{}`)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "shard-3: the proxy knows no REST API address for it") {
		t.Errorf("a shard without a REST address: %d %s", r.status, r.body)
	}
}

// TestFederatedSearchWithAShardKilled walks pages through the proxy, as
// processes, while a simulator is killed (SIGKILL) between pages: the
// next page is a 503 naming it; a proxy run with --search-partial answers
// from the others, marked.
func TestFederatedSearchWithAShardKilled(t *testing.T) {
	bin := proctest.Build(t)
	var shardFlags []string
	var sims []*proctest.Process
	for i := range 3 {
		s := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "1")
		sims = append(sims, s)
		shardFlags = append(shardFlags, "--shard", fmt.Sprintf("s%d=%s,rest=http://%s", i+1, s.Addr, restAddr(t, s)))
	}
	serve := func(more ...string) string {
		args := append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0", "--shutdown-delay", "0"}, shardFlags...)
		return "http://" + restAddr(t, proctest.Start(t, bin, nil, append(args, more...)...))
	}
	base, partial := serve(), serve("--search-partial", "--search-timeout", "3s")
	deployREST(t, base, "k.bpmn", load.Process("k", "k-task"))
	for range 30 {
		if r := restCall(t, http.MethodPost, base+"/v2/process-instances", "application/json", []byte(`{"processDefinitionId":"k"}`)); r.status != http.StatusOK {
			t.Fatalf("create %d %s", r.status, r.body)
		}
	}
	first := postSearch(t, base, "process-instances", `{"sort":[{"field":"startDate"}],"page":{"limit":5}}`)
	if first.status != http.StatusOK || first.Page.TotalItems != 30 {
		t.Fatalf("first page %d %s", first.status, first.body)
	}
	sims[1].Kill()
	<-sims[1].Done()
	next := fmt.Sprintf(`{"sort":[{"field":"startDate"}],"page":{"limit":5,"after":%q}}`, *first.Page.EndCursor)
	r := postSearch(t, base, "process-instances", next)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, "shard s2 did not answer") {
		t.Errorf("with s2 killed: %d %s, want 503 naming s2", r.status, r.body)
	}
	r = postSearch(t, partial, "process-instances", next)
	if r.status != http.StatusOK || r.partial != "missing=s2" || r.Page.TotalItems >= 30 || r.Page.TotalItems == 0 {
		t.Errorf("with s2 killed, --search-partial: %d %q %s", r.status, r.partial, r.body)
	}
}
