package source

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"
)

// fakeTarget serves Zeebe metrics whose values a test sets.
type fakeTarget struct {
	mu sync.Mutex
	fakeValues
	latency string // the latency histogram's name: Latency85 (default) or LatencyMicrometer
}

type fakeValues struct {
	created, completed, dropped float64
	committed, processed        float64
	fast, slow                  float64 // observations ≤ 0.01 s and ≤ 5 s
}

func (f *fakeTarget) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(w, `# TYPE zeebe_element_instance_events_total counter
zeebe_element_instance_events_total{action="activated",type="PROCESS",partition="1"} %g
zeebe_element_instance_events_total{action="completed",type="PROCESS",partition="1"} %g
zeebe_element_instance_events_total{action="activated",type="SERVICE_TASK",partition="1"} 999
# TYPE zeebe_dropped_request_count_total counter
zeebe_dropped_request_count_total{partition="1"} %g
# TYPE zeebe_received_request_count_total counter
zeebe_received_request_count_total{partition="1"} %g
# TYPE zeebe_log_appender_last_committed_position gauge
zeebe_log_appender_last_committed_position{partition="1"} %g
# TYPE zeebe_stream_processor_last_processed_position gauge
zeebe_stream_processor_last_processed_position{partition="1"} %g
`, f.created, f.completed, f.dropped, f.created*2, f.committed, f.processed)
	l := cmp.Or(f.latency, Latency85)
	fmt.Fprintf(w, `# TYPE %[1]s histogram
%[1]s_bucket{partition="1",le="0.01"} %[2]g
%[1]s_bucket{partition="1",le="5"} %[3]g
%[1]s_bucket{partition="1",le="+Inf"} %[3]g
%[1]s_sum{partition="1"} 0
%[1]s_count{partition="1"} %[3]g
`, l, f.fast, f.fast+f.slow)
}

func TestScrapeRatesAndHeatmap(t *testing.T) {
	for _, tc := range []struct{ latency, names string }{{Latency85, Names85}, {LatencyMicrometer, NamesMicrometer}} {
		t.Run(tc.names, func(t *testing.T) { scrapeRatesAndHeatmap(t, tc.latency, tc.names) })
	}
}

// The same page under either generation's latency name reads the same,
// and says which it was.
func scrapeRatesAndHeatmap(t *testing.T, latency, names string) {
	f := &fakeTarget{latency: latency}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s, err := NewScrape([]Target{{Name: "s1", URL: srv.URL}}, "zeebe", time.Second, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Fetch(ctx, time.Now(), time.Minute, time.Second); err == nil {
		t.Fatalf("rates from no samples")
	}
	// Three scrapes a second apart (ring timestamps set by hand).
	base := time.Now().Truncate(time.Second).Add(-3 * time.Second)
	steps := []fakeValues{
		{created: 100, completed: 100, committed: 50, processed: 40, fast: 10},
		{created: 200, completed: 150, committed: 150, processed: 60, fast: 20, slow: 30},
		{created: 50, completed: 40, committed: 250, processed: 80, fast: 25, slow: 60}, // a restart: counters fell
	}
	for i, st := range steps {
		f.mu.Lock()
		f.fakeValues = st
		f.mu.Unlock()
		s.ScrapeOnce(ctx)
		s.mu.Lock()
		ring := s.rings["s1"]
		ring[len(ring)-1].at = base.Add(time.Duration(i) * time.Second)
		s.mu.Unlock()
	}
	shards, err := s.Fetch(ctx, base.Add(2*time.Second), 3*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(shards) != 1 || shards[0].Name != "s1" {
		t.Fatalf("shards %+v", shards)
	}
	sh := shards[0]
	if sh.MetricNames != names {
		t.Errorf("metric names %q, want %q", sh.MetricNames, names)
	}
	if got := sh.Created.Values(); len(got) != 2 || got[0] != 100 || got[1] != 50 {
		t.Errorf("created/s %v, want [100 50] (the second after a counter reset)", got)
	}
	if got := sh.Completed.Values(); len(got) != 2 || got[0] != 50 || got[1] != 40 {
		t.Errorf("completed/s %v, want [50 40]", got)
	}
	if got := sh.Queue.Values(); len(got) != 3 || got[0] != 10 || got[2] != 170 {
		t.Errorf("queue %v, want [10 90 170]", got)
	}
	if got := sh.Received.Values(); len(got) != 2 || got[0] != 200 {
		t.Errorf("received/s %v, want 200 first", got)
	}
	// Heatmap: per step, increases per bucket (not cumulative).
	if len(sh.Latency.Times) != 2 || len(sh.Latency.Bounds) != 3 || !math.IsInf(sh.Latency.Bounds[2], 1) {
		t.Fatalf("heatmap %+v", sh.Latency)
	}
	if got := sh.Latency.Counts[0]; got[0] != 10 || got[1] != 30 || got[2] != 0 {
		t.Errorf("first step's buckets %v, want [10 30 0]", got)
	}
	if got := sh.Latency.Counts[1]; got[0] != 5 || got[1] != 30 {
		t.Errorf("second step's buckets %v, want [5 30 0]", got)
	}
}

func TestScrapeErrors(t *testing.T) {
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "this is { not metrics")
	}))
	defer bad.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	s, err := NewScrape([]Target{{"bad", bad.URL}, {"down", down.URL}}, "zeebe", time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.ScrapeOnce(context.Background())
	errs := s.Errors()
	if errs["bad"] == nil || errs["down"] == nil {
		t.Errorf("errors %v, want both targets", errs)
	}
	if _, err := s.Fetch(context.Background(), time.Now(), time.Minute, time.Second); err == nil {
		t.Errorf("fetch from targets that never answered succeeded")
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		in, name, url string
		err           bool
	}{
		{"blue=http://10.0.0.5:9600/metrics", "blue", "http://10.0.0.5:9600/metrics", false},
		{"http://10.0.0.5:9600/metrics", "10.0.0.5:9600", "http://10.0.0.5:9600/metrics", false},
		{"http://h:1/metrics?a=b", "h:1", "http://h:1/metrics?a=b", false},
		{"blue=ftp://x", "", "", true},
		{"10.0.0.5:9600", "", "", true},
	} {
		got, err := ParseTarget(tc.in)
		if (err != nil) != tc.err || (err == nil && (got.Name != tc.name || got.URL != tc.url)) {
			t.Errorf("ParseTarget(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

func TestPresets(t *testing.T) {
	for name := range Presets {
		if err := Presets[name].check(); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
	q, err := render(Presets["zeebe"].Created, "cluster", 30*time.Second, 5*time.Second)
	if err != nil || q != `sum by (cluster) (rate(zeebe_element_instance_events_total{type="PROCESS",action="activated"}[30s]))` {
		t.Errorf("rendered %q, %v", q, err)
	}
	if _, err := LoadPreset("nope", ""); err == nil {
		t.Errorf("an unknown preset loaded")
	}
	if got := promDuration(90 * time.Second); got != "90s" {
		t.Errorf("90s as %q", got)
	}
	if got := promDuration(2 * time.Minute); got != "2m" {
		t.Errorf("2m as %q", got)
	}
}

func TestQueriesFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p, err := LoadPreset("zeebe", write("ok.yaml", "groupBy: namespace\ncompleted: sum by ({{.GroupBy}}) (rate(my_completions[{{.Rate}}]))\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p.GroupBy != "namespace" || p.Completed != "sum by ({{.GroupBy}}) (rate(my_completions[{{.Rate}}]))" || p.Created != Presets["zeebe"].Created {
		t.Errorf("overrides not applied or others lost: %+v", p)
	}
	for _, bad := range []string{"craeted: x\n", "created: '{{.Nope}}'\n", "created: '{{'\n"} {
		if _, err := LoadPreset("zeebe", write("bad.yaml", bad)); err == nil {
			t.Errorf("queries file %q accepted", bad)
		}
	}
}

// A scrape parses only the families it reads: the filtered page parses to
// exactly those families of the whole page, comments and look-alike
// names notwithstanding.
func TestKeepFamilies(t *testing.T) {
	const page = `# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 12
# a comment naming zeebe_stream_processor_latency
#  TYPE   zeebe_stream_processor_latency histogram
zeebe_stream_processor_latency_bucket{partition="1",le="0.01"} 3
zeebe_stream_processor_latency_bucket{partition="1",le="+Inf"} 5
zeebe_stream_processor_latency_sum{partition="1"} 0.5
zeebe_stream_processor_latency_count{partition="1"} 5
# TYPE zeebe_stream_processor_latency_other histogram
zeebe_stream_processor_latency_other_bucket{le="+Inf"} 1
zeebe_stream_processor_latency_other_sum 1
zeebe_stream_processor_latency_other_count 1

# HELP zeebe_dropped_request_count_total Dropped.
# TYPE zeebe_dropped_request_count_total counter
zeebe_dropped_request_count_total{partition="1"} 7
zeebe_dropped_request_count_total_extra 1
zeebe_dropped_request_count_total{partition="2"} 8
`
	names := map[string]bool{"zeebe_stream_processor_latency": true, "zeebe_dropped_request_count_total": true}
	parse := func(b []byte) map[string]*dto.MetricFamily {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%v in:\n%s", err, b)
		}
		return fams
	}
	whole := parse([]byte(page))
	kept := parse(keepFamilies([]byte(page), names))
	if len(kept) != len(names) {
		t.Errorf("kept %d families, want %d", len(kept), len(names))
	}
	for name := range names {
		if !proto.Equal(whole[name], kept[name]) {
			t.Errorf("%s: kept %v, the whole page has %v", name, kept[name], whole[name])
		}
	}
}

// A target that stops answering: its series end where it stopped (not
// its last value repeated), and it is named with why; one that never
// answered is a shard without data, not a shard left out.
func TestScrapeATargetThatStopped(t *testing.T) {
	f := &fakeTarget{}
	live := httptest.NewServer(f)
	defer live.Close()
	dying := httptest.NewServer(f)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	s, err := NewScrape([]Target{{"live", live.URL}, {"dying", dying.URL}, {"dead", dead.URL}}, "zeebe", time.Second, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	base := time.Now().Truncate(time.Second).Add(-time.Minute)
	stamp := func(i int) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for name, ring := range s.rings {
			if len(ring) > 0 && (name != "dying" || i < 3) {
				ring[len(ring)-1].at = base.Add(time.Duration(i) * time.Second)
			}
		}
	}
	for i := range 10 {
		if i == 3 {
			dying.Close()
		}
		f.mu.Lock()
		f.created += 10
		f.committed += 5
		f.mu.Unlock()
		s.ScrapeOnce(ctx)
		stamp(i)
	}
	shards, err := s.Fetch(ctx, base.Add(9*time.Second), 10*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for i, sh := range shards {
		by[sh.Name] = i
	}
	if len(shards) != 3 {
		t.Fatalf("shards %v: want live, dying and dead", by)
	}
	d := shards[by["dying"]]
	if last := d.Queue[len(d.Queue)-1].T; !last.Before(base.Add(6*time.Second)) || d.Missing == "" {
		t.Errorf("dying: queue until %v (want it to end within 3 s of its last answer at %v), missing %q", last, base.Add(2*time.Second), d.Missing)
	}
	if l := shards[by["live"]]; l.Queue[len(l.Queue)-1].T != base.Add(9*time.Second) || l.Missing != "" {
		t.Errorf("live: queue until %v, missing %q", l.Queue[len(l.Queue)-1].T, l.Missing)
	}
	if x := shards[by["dead"]]; len(x.Queue) != 0 || x.Missing == "" {
		t.Errorf("dead: %+v, want no series and why", x)
	}
}

// Discover names the targets anew: a target it drops is dropped with its
// history; one it cannot ask keeps those there are.
func TestScrapeDiscover(t *testing.T) {
	f := &fakeTarget{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s, err := NewScrape(nil, "zeebe", 10*time.Millisecond, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fetch(context.Background(), time.Now(), time.Minute, time.Second); err == nil {
		t.Fatal("a fetch with no targets found no error")
	}
	var mu sync.Mutex
	found := []Target{{"a", srv.URL}, {"b", srv.URL}}
	var fail error
	s.Discover = func(context.Context) ([]Target, error) {
		mu.Lock()
		defer mu.Unlock()
		return found, fail
	}
	s.discover(context.Background())
	s.ScrapeOnce(context.Background())
	if got := len(s.Targets()); got != 2 || !s.Sampled(1) {
		t.Fatalf("%d targets after discovery, sampled %v", got, s.Sampled(1))
	}
	mu.Lock()
	found = []Target{{"b", srv.URL}}
	mu.Unlock()
	s.discover(context.Background())
	s.mu.Lock()
	_, kept := s.rings["a"]
	s.mu.Unlock()
	if got := s.Targets(); len(got) != 1 || got[0].Name != "b" || kept {
		t.Errorf("after a drops out: targets %v, a's history kept %v", got, kept)
	}
	mu.Lock()
	fail = fmt.Errorf("registry down")
	mu.Unlock()
	s.discover(context.Background())
	if got := s.Targets(); len(got) != 1 {
		t.Errorf("a failed discovery changed the targets: %v", got)
	}
}
