package search

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct {
		name, body     string
		status         int
		title, contain string
	}{
		{"after and before", `{"page":{"after":"WzFd","before":"WzFd"}}`, 400, "INVALID_ARGUMENT", "Both after and before cannot be set at the same time."},
		{"from and after", `{"page":{"from":1,"after":"WzFd"}}`, 400, "INVALID_ARGUMENT", "Both after/before and from cannot be set at the same time."},
		{"sort without field", `{"sort":[{"order":"ASC"}]}`, 400, "INVALID_ARGUMENT", "Sort field must not be null."},
		{"unknown sort field", `{"sort":[{"field":"foo"}]}`, 400, "INVALID_ARGUMENT", "Unexpected value 'foo' for enum field 'field'. Use any of the following values: [processDefinitionId,"},
		{"bad order", `{"sort":[{"field":"state","order":"UP"}]}`, 400, "INVALID_ARGUMENT", "Unexpected value 'UP' for enum field 'order'"},
		{"bad date", `{"filter":{"startDate":{"$gt":"yesterday"}}}`, 400, "INVALID_ARGUMENT", "The provided startDate 'yesterday' cannot be parsed as a date according to RFC 3339, section 5.6."},
		{"bad key", `{"filter":{"processInstanceKey":"abc"}}`, 400, "INVALID_ARGUMENT", "The provided processInstanceKey 'abc' is not a valid key."},
		{"bad enum", `{"filter":{"state":"BOGUS"}}`, 400, "INVALID_ARGUMENT", "Unexpected value 'BOGUS' for enum field 'state'. Use any of the following values: [ACTIVE, COMPLETED, TERMINATED]"},
		{"limit not a number", `{"page":{"limit":"x"}}`, 400, "Bad Request", "Request property [page.limit] cannot be parsed"},
		{"unknown property", `{"filters":{}}`, 400, "Bad Request", "Request property [filters] cannot be parsed: unknown property"},
		{"unknown filter property", `{"filter":{"colour":"red"}}`, 400, "Bad Request", "Request property [filter.colour] cannot be parsed: unknown property"},
		{"operator a key does not take", `{"filter":{"processInstanceKey":{"$like":"1*"}}}`, 400, "Bad Request", "Request property [filter.processInstanceKey] cannot be parsed"},
		{"unsupported property", `{"filter":{"variables":[]}}`, 400, "INVALID_ARGUMENT", "The filter property 'variables' of process-instances is not supported by shardctl."},
		{"not an object", `[1]`, 400, "Bad Request", "Failed to read request"},
		{"cursor not base64", `{"page":{"after":"%%%"}}`, 400, "INVALID_ARGUMENT", "The provided cursor '%%%' is not valid for this query."},
		{"cursor of another sort", `{"page":{"after":"` + EncodeCursor([]Value{KeyValue(1), KeyValue(2)}) + `"}}`, 400, "INVALID_ARGUMENT", "is not valid for this query"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(ProcessInstances, []byte(tt.body))
			e, ok := err.(*Error)
			if !ok {
				t.Fatalf("error %v (%T), want *Error", err, err)
			}
			if e.Status != tt.status || e.Title != tt.title || !strings.Contains(e.Detail, tt.contain) {
				t.Errorf("got %d %s %q, want %d %s containing %q", e.Status, e.Title, e.Detail, tt.status, tt.title, tt.contain)
			}
		})
	}
}

func TestParseDefaults(t *testing.T) {
	for _, body := range []string{``, `{}`, `{"filter":null,"page":null}`} {
		q, err := Parse(Jobs, []byte(body))
		if err != nil || q.Page.Limit != DefaultLimit || q.Page.From != 0 || len(q.Filter.Conds) != 0 || len(q.Sort) != 0 {
			t.Errorf("%q: %+v %v", body, q, err)
		}
	}
	q, err := Parse(Jobs, []byte(`{"page":{"from":-3,"limit":-1}}`))
	if err != nil || q.Page.From != 0 || q.Page.Limit != 0 {
		t.Errorf("negative from and limit are clamped to 0: %+v %v", q.Page, err)
	}
}

func TestLike(t *testing.T) {
	for _, tt := range []struct {
		pattern, s string
		want       bool
	}{
		{"abc", "abc", true}, {"abc", "abcd", false}, {"a*", "abcd", true}, {"*c*", "abcd", true},
		{"*x*", "abcd", false}, {"a?c", "abc", true}, {"a?c", "ac", false}, {`a\*c`, "a*c", true},
		{`a\*c`, "abc", false}, {"*", "", true}, {"?", "", false}, {"a*b*c", "aXbYbZc", true}, {`a\?`, "a?", true},
		{"ü*", "über", true},
	} {
		if got := like(tt.pattern, tt.s); got != tt.want {
			t.Errorf("like(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestFilterSemantics(t *testing.T) {
	r := Jobs
	it := NewItem(r).Set(r, "jobKey", KeyValue(7)).Set(r, "type", StringValue("pay")).Set(r, "retries", IntValue(3)).
		Set(r, "state", EnumValue("CREATED")).Set(r, "deadline", DateValue(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)))
	for _, tt := range []struct {
		filter string
		want   bool
	}{
		{`{"type":"pay"}`, true},
		{`{"type":{"$neq":"pay"}}`, false},
		{`{"worker":{"$neq":"w"}}`, true}, // absent matches $neq
		{`{"worker":{"$exists":false}}`, true},
		{`{"worker":{"$exists":true}}`, false},
		{`{"worker":"w"}`, false},
		{`{"worker":{"$notIn":["a"]}}`, true},
		{`{"type":{"$in":["x","pay"]}}`, true},
		{`{"type":{"$like":"p*"}}`, true},
		{`{"retries":{"$gte":3,"$lt":4}}`, true},
		{`{"retries":{"$gt":3}}`, false},
		{`{"deadline":{"$gte":"2026-12-05T09:00:00Z","$lte":"2026-12-05T11:00:00+01:00"}}`, true},
		{`{"deadline":{"$lt":"2026-12-05T10:00:00.000Z"}}`, false},
		{`{"jobKey":"7","state":{"$in":["CREATED","FAILED"]}}`, true},
		{`{"jobKey":{"$notIn":["7"]}}`, false},
		{`{"state":{"$like":"CREA*"}}`, true},
	} {
		q, err := Parse(r, []byte(`{"filter":`+tt.filter+`}`))
		if err != nil {
			t.Fatalf("%s: %v", tt.filter, err)
		}
		if got := q.Filter.Match(it); got != tt.want {
			t.Errorf("%s: match %v, want %v", tt.filter, got, tt.want)
		}
	}
	q, err := Parse(ProcessInstances, []byte(`{"filter":{"state":"ACTIVE","$or":[{"processDefinitionId":"a"},{"processDefinitionId":"b","hasIncident":true}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	pi := func(id string, inc bool) Item {
		return NewItem(ProcessInstances).Set(ProcessInstances, "processInstanceKey", KeyValue(1)).Set(ProcessInstances, "state", EnumValue("ACTIVE")).
			Set(ProcessInstances, "processDefinitionId", StringValue(id)).Set(ProcessInstances, "hasIncident", BoolValue(inc))
	}
	for _, tt := range []struct {
		it   Item
		want bool
	}{{pi("a", false), true}, {pi("b", false), false}, {pi("b", true), true}, {pi("c", true), false}} {
		if got := q.Filter.Match(tt.it); got != tt.want {
			t.Errorf("$or on %v: %v, want %v", tt.it.Values, got, tt.want)
		}
	}
}

// TestFilterJSONRoundTrip: a parsed filter written back parses to the
// same filter (the proxy forwards filters it has parsed).
func TestFilterJSONRoundTrip(t *testing.T) {
	for _, f := range []string{
		`{}`,
		`{"type":"pay","retries":{"$gte":1,"$lte":5},"jobKey":{"$in":["1","2"]},"worker":{"$exists":false}}`,
		`{"state":{"$neq":"CREATED"},"elementId":{"$like":"task\\*"},"deadline":{"$gt":"2026-01-01T00:00:00.000Z"}}`,
	} {
		q, err := Parse(Jobs, []byte(`{"filter":`+f+`}`))
		if err != nil {
			t.Fatal(err)
		}
		b := q.Filter.AppendJSON(Jobs, nil)
		q2, err := Parse(Jobs, append(append([]byte(`{"filter":`), b...), '}'))
		if err != nil {
			t.Fatalf("%s -> %s: %v", f, b, err)
		}
		if fmt.Sprint(q.Filter) != fmt.Sprint(q2.Filter) {
			t.Errorf("%s -> %s -> %v, want %v", f, b, q2.Filter, q.Filter)
		}
	}
	q, err := Parse(ProcessInstances, []byte(`{"filter":{"state":"ACTIVE","$or":[{"processDefinitionId":"a"},{"processDefinitionKey":{"$in":["5"]}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	b := q.Filter.AppendJSON(ProcessInstances, nil)
	if want := `{"state":"ACTIVE","$or":[{"processDefinitionId":"a"},{"processDefinitionKey":{"$in":["5"]}}]}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}

func TestRestrict(t *testing.T) {
	// The part holds odd keys only, as they are halved.
	keep := func(_ int, v Value) (Value, bool) { return KeyValue(v.N / 2), v.N%2 == 1 }
	for _, tt := range []struct {
		filter, want string
		ok           bool
	}{
		{`{"jobKey":"3"}`, `{"jobKey":"1"}`, true},
		{`{"jobKey":"4"}`, ``, false},
		{`{"jobKey":{"$in":["3","4","5"]}}`, `{"jobKey":{"$in":["1","2"]}}`, true},
		{`{"jobKey":{"$in":["4","6"]}}`, ``, false},
		{`{"jobKey":{"$neq":"4"},"type":"a"}`, `{"type":"a"}`, true},
		{`{"jobKey":{"$notIn":["4","5"]}}`, `{"jobKey":{"$notIn":["2"]}}`, true},
		{`{"processInstanceKey":{"$exists":true}}`, `{"processInstanceKey":{"$exists":true}}`, true},
	} {
		q, err := Parse(Jobs, []byte(`{"filter":`+tt.filter+`}`))
		if err != nil {
			t.Fatal(err)
		}
		out, ok := q.Filter.Restrict(Jobs, keep)
		if ok != tt.ok || ok && string(out.AppendJSON(Jobs, nil)) != tt.want {
			t.Errorf("%s: %s %v, want %s %v", tt.filter, out.AppendJSON(Jobs, nil), ok, tt.want, tt.ok)
		}
	}
}

// randomInstances are process instances with few distinct values, so
// sorts meet ties and absent values.
func randomInstances(rng *rand.Rand, n int, firstKey int64) []Item {
	r := ProcessInstances
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	items := make([]Item, n)
	for i := range items {
		it := NewItem(r).
			Set(r, "processInstanceKey", KeyValue(firstKey+int64(i)*3+int64(rng.IntN(3)))).
			Set(r, "processDefinitionId", StringValue([]string{"order", "invoice", "ship"}[rng.IntN(3)])).
			Set(r, "processDefinitionVersion", IntValue(int64(1+rng.IntN(3)))).
			Set(r, "state", EnumValue(processInstanceStates[rng.IntN(3)])).
			Set(r, "hasIncident", BoolValue(rng.IntN(4) == 0)).
			Set(r, "startDate", DateValue(base.Add(time.Duration(rng.IntN(50))*time.Minute))).
			Set(r, "tenantId", StringValue("<default>"))
		if rng.IntN(2) == 0 {
			it = it.Set(r, "endDate", DateValue(base.Add(time.Duration(rng.IntN(50)+50)*time.Minute)))
		}
		items[i] = it
	}
	return items
}

func randomQuery(rng *rand.Rand) string {
	var filters []string
	if rng.IntN(2) == 0 {
		filters = append(filters, fmt.Sprintf(`"state":{"$in":["ACTIVE","%s"]}`, processInstanceStates[rng.IntN(3)]))
	}
	if rng.IntN(3) == 0 {
		filters = append(filters, `"processDefinitionId":{"$like":"*i*"}`)
	}
	if rng.IntN(3) == 0 {
		filters = append(filters, `"endDate":{"$exists":true}`)
	}
	fields := []string{"processDefinitionId", "processDefinitionVersion", "state", "hasIncident", "startDate", "endDate", "processInstanceKey"}
	var sorts []string
	for range rng.IntN(3) {
		order := []string{"ASC", "DESC"}[rng.IntN(2)]
		sorts = append(sorts, fmt.Sprintf(`{"field":%q,"order":%q}`, fields[rng.IntN(len(fields))], order))
	}
	return fmt.Sprintf(`{"filter":{%s},"sort":[%s]`, strings.Join(filters, ","), strings.Join(sorts, ","))
}

func keysOf(items []Item) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.Values[ProcessInstances.KeyField()].N
	}
	return out
}

// TestWalkAndMerge: paging by cursor through one store, forwards and
// backwards, and through three stores merged page by page, yields the
// brute-force answer, each item once, for random data and queries.
func TestWalkAndMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := ProcessInstances
	for round := range 200 {
		parts := [][]Item{randomInstances(rng, rng.IntN(40), 1000), randomInstances(rng, rng.IntN(40), 2000), randomInstances(rng, rng.IntN(40), 3000)}
		all := slices.Concat(parts...)
		base := randomQuery(rng)
		limit := 1 + rng.IntN(12)
		q, err := Parse(r, []byte(base+`}`))
		if err != nil {
			t.Fatalf("%s: %v", base, err)
		}
		want := keysOf(Run(r, all, Query{Filter: q.Filter, Sort: q.Sort, Page: Page{Limit: len(all)}}).Items)
		o := q.Order(r)

		walk := func(next func(cursor string) Result, backwards bool) []int64 {
			var got []int64
			cursor := ""
			for step := 0; ; step++ {
				if step > len(all)+2 {
					t.Fatalf("round %d: the walk does not end", round)
				}
				res := next(cursor)
				if len(res.Items) == 0 {
					break
				}
				ks := keysOf(res.Items)
				if backwards {
					got = append(ks, got...)
					cursor = EncodeCursor(o.Position(res.Items[0]))
				} else {
					got = append(got, ks...)
					cursor = EncodeCursor(o.Position(res.Items[len(res.Items)-1]))
				}
				if res.Total != int64(len(want)) {
					t.Fatalf("round %d: total %d, want %d", round, res.Total, len(want))
				}
			}
			return got
		}
		page := func(cursor string, backwards bool) Query {
			name := "after"
			if backwards {
				name = "before"
			}
			body := base + fmt.Sprintf(`,"page":{"limit":%d}}`, limit)
			if cursor != "" {
				body = base + fmt.Sprintf(`,"page":{"limit":%d,%q:%q}}`, limit, name, cursor)
			}
			q, err := Parse(r, []byte(body))
			if err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			return q
		}
		one := walk(func(c string) Result { return Run(r, all, page(c, false)) }, false)
		merged := walk(func(c string) Result {
			q := page(c, false)
			var pages [][]Item
			var total int64
			for _, p := range parts {
				res := Run(r, p, q)
				pages, total = append(pages, res.Items), total+res.Total
			}
			return Result{Items: Merge(pages, o, q.Page), Total: total}
		}, false)
		// Backwards from the end: the last page is the one before a cursor
		// past every item; it is not the same as the forward pages, but
		// the items are.
		last := Run(r, all, page("", false))
		if len(last.Items) > 0 {
			sorted := Run(r, all, Query{Filter: q.Filter, Sort: q.Sort, Page: Page{Limit: len(all)}}).Items
			end := EncodeCursor(o.Position(sorted[len(sorted)-1]))
			back := walk(func(c string) Result {
				if c == "" {
					res := Run(r, all, page(end, true))
					res.Items = append(res.Items, sorted[len(sorted)-1])
					return res
				}
				return Run(r, all, page(c, true))
			}, true)
			if !slices.Equal(back, want) {
				t.Fatalf("round %d %s limit %d: backwards %v, want %v", round, base, limit, back, want)
			}
		}
		if !slices.Equal(one, want) || !slices.Equal(merged, want) {
			t.Fatalf("round %d %s limit %d:\n one    %v\n merged %v\n want   %v", round, base, limit, one, merged, want)
		}
		// Offsets: every page merged from the parts' first from+limit.
		for from := 0; from < len(want); from += limit {
			var pages [][]Item
			for _, p := range parts {
				pages = append(pages, Run(r, p, Query{Filter: q.Filter, Sort: q.Sort, Page: Page{Limit: from + limit}}).Items)
			}
			got := keysOf(Merge(pages, o, Page{From: from, Limit: limit}))
			if !slices.Equal(got, want[from:min(from+limit, len(want))]) {
				t.Fatalf("round %d from %d: %v, want %v", round, from, got, want[from:min(from+limit, len(want))])
			}
		}
	}
}

func TestResultJSON(t *testing.T) {
	r := Incidents
	o := Order{Key: r.KeyField()}
	var empty []byte
	empty = Result{}.AppendJSON(r, o, empty)
	if want := `{"items":[],"page":{"totalItems":0,"hasMoreTotalItems":false,"startCursor":null,"endCursor":null}}`; string(empty) != want {
		t.Errorf("empty: %s", empty)
	}
	it := NewItem(r).Set(r, "incidentKey", KeyValue(2251799813687102)).Set(r, "errorType", EnumValue("JOB_NO_RETRIES")).
		Set(r, "creationTime", DateValue(time.Date(2020, 11, 11, 10, 10, 11, 123e6, time.UTC)))
	b := Result{Items: []Item{it}, Total: 1}.AppendJSON(r, o, nil)
	var got struct {
		Items []map[string]any
		Page  struct{ StartCursor, EndCursor string }
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if got.Items[0]["incidentKey"] != "2251799813687102" || got.Items[0]["creationTime"] != "2020-11-11T10:10:11.123Z" || got.Items[0]["jobKey"] != nil {
		t.Errorf("item %v", got.Items[0])
	}
	// Camunda's own example: sorted by key only, [2251799813687102].
	if got.Page.StartCursor != "WzIyNTE3OTk4MTM2ODcxMDJd" || got.Page.EndCursor != got.Page.StartCursor {
		t.Errorf("cursors %+v", got.Page)
	}
	back, err := DecodeItem(r, json.RawMessage(mustJSON(t, got.Items[0])))
	if err != nil || back.Get(r, "incidentKey") != it.Get(r, "incidentKey") || back.Get(r, "creationTime").N != it.Get(r, "creationTime").N ||
		back.Get(r, "errorType") != it.Get(r, "errorType") {
		t.Errorf("decode: %v %v", back, err)
	}
	if _, err := DecodeItem(r, json.RawMessage(`{"errorType":"JOB_NO_RETRIES"}`)); err == nil {
		t.Error("an item without its key decodes")
	}
	x, err := DecodeItem(r, json.RawMessage(`{"incidentKey":"5","errorType":"NEW_KIND","someNewKey":"9"}`))
	if err != nil || x.Get(r, "errorType").S != "NEW_KIND" || string(x.Extra["someNewKey"]) != `"9"` {
		t.Errorf("lenient decode: %+v %v", x, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeItem: whatever a shard answers, reading it does not panic,
// and an item read is written again as valid JSON.
func FuzzDecodeItem(f *testing.F) {
	for _, s := range []string{
		`{"processInstanceKey":"5","state":"ACTIVE","tags":[],"startDate":"2026-01-01T00:00:00.000Z"}`,
		`{"processInstanceKey":5,"processDefinitionId":"a\"b","hasIncident":false,"x":{"y":[1,2]}}`,
		`{"processInstanceKey":"5","tags":{]}`, `{"processInstanceKey":"5",}`, `{"processInstanceKey":"5"}x`,
		`{"processInstanceKey":"5","processDefinitionVersion":01}`, `{"items":[{"processInstanceKey":"1"}],"page":{"totalItems":1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if it, err := DecodeItem(ProcessInstances, b); err == nil {
			if out := it.AppendJSON(ProcessInstances, nil); !json.Valid(out) {
				t.Fatalf("%q read, written as %q", b, out)
			}
		}
		if res, err := DecodeResult(ProcessInstances, b); err == nil {
			if out := res.AppendJSON(ProcessInstances, Order{Key: ProcessInstances.KeyField()}, nil); !json.Valid(out) {
				t.Fatalf("%q read, written as %q", b, out)
			}
		}
	})
}
