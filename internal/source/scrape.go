package source

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shardctl/shardctl/internal/signals"
)

// Target is a /metrics endpoint to scrape; Name labels its shard.
type Target struct {
	Name, URL string
}

// ParseTarget reads --scrape [NAME=]URL; without NAME the shard is named
// by the URL's host:port.
func ParseTarget(v string) (Target, error) {
	name, raw, ok := strings.Cut(v, "=")
	if !ok || strings.Contains(name, "/") || strings.Contains(name, ":") {
		name, raw = "", v
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return Target{}, fmt.Errorf("--scrape %q: want [NAME=]http://HOST:PORT/metrics", v)
	}
	if name == "" {
		name = u.Host
	}
	return Target{Name: name, URL: u.String()}, nil
}

// rule picks samples of one metric with some label values.
type rule struct {
	metric string
	match  map[string]string
}

// scrapeRules say what a preset's signals are in raw samples: the same
// as its PromQL, without a server.
type scrapeRules struct {
	group                                            string   // label naming the shard; "" = the target
	created, completed, dropped, received, throttled []rule   // counters, summed
	queueAdd, queueSub                               []rule   // gauges: Σ add − Σ sub
	latency                                          []string // histogram families, summed by le: the first a shard exports
}

// writeRateRefused matches the user commands flow control refused at the
// write-rate limit (8.6+).
var writeRateRefused = map[string]string{"context": "userCommand", "outcome": "writeRateLimitExhausted"}

var presetRules = map[string]scrapeRules{
	"zeebe": {
		created:   []rule{{"zeebe_element_instance_events_total", map[string]string{"type": "PROCESS", "action": "activated"}}},
		completed: []rule{{"zeebe_element_instance_events_total", map[string]string{"type": "PROCESS", "action": "completed"}}},
		dropped:   []rule{{"zeebe_dropped_request_count_total", nil}},
		received:  []rule{{"zeebe_received_request_count_total", nil}},
		// 8.8's name and 8.6's: a shard exports one of them.
		throttled: []rule{{"zeebe_flow_control_total", writeRateRefused}, {"zeebe_flow_control_outcome_total", writeRateRefused}},
		queueAdd:  []rule{{"zeebe_log_appender_last_committed_position", nil}},
		queueSub:  []rule{{"zeebe_stream_processor_last_processed_position", nil}},
		latency:   []string{LatencyMicrometer, Latency85},
	},
	"proxy": {
		group:    "shard",
		created:  []rule{{"shardctl_proxy_p2c_choices_total", nil}},
		dropped:  []rule{{"shardctl_proxy_shard_requests_total", map[string]string{"code": "ResourceExhausted"}}},
		received: []rule{{"shardctl_proxy_shard_requests_total", nil}},
		queueAdd: []rule{{"shardctl_proxy_shard_inflight_requests", nil}},
	},
}

// families are the metric families the rules read: a scrape parses only
// those (a Zeebe broker's page holds hundreds it has no use for).
func (r scrapeRules) families() map[string]bool {
	out := map[string]bool{}
	for _, rules := range [][]rule{r.created, r.completed, r.dropped, r.received, r.throttled, r.queueAdd, r.queueSub} {
		for _, x := range rules {
			out[x.metric] = true
		}
	}
	for _, name := range r.latency {
		out[name] = true
	}
	return out
}

// values are one shard's numbers in one scrape.
type values struct {
	created, completed, dropped, received, throttled, queue float64
	buckets                                                 map[float64]float64 // cumulative, by upper bound
	has                                                     map[string]bool
	names                                                   string // the generation of Zeebe's names read
}

type sample struct {
	at     time.Time
	shards map[string]*values
}

// Scrape reads /metrics endpoints every Interval into a ring buffer and
// computes rates and histogram increases from it.
type Scrape struct {
	targets  []Target
	rules    scrapeRules
	families map[string]bool
	Interval time.Duration
	// Keep is how much history the ring holds.
	Keep time.Duration
	HTTP *http.Client
	// Discover, when set, names the targets anew every DiscoverEvery
	// (default 10 s): a target it no longer names is dropped with its
	// history, a new one scraped from then on.
	Discover      func(context.Context) ([]Target, error)
	DiscoverEvery time.Duration

	mu      sync.Mutex
	rings   map[string][]sample // by target
	errs    map[string]error
	lastErr error // of the last discovery
}

// NewScrape prepares a scraping source for a preset (zeebe or proxy);
// with no targets, set Discover before Run.
func NewScrape(targets []Target, preset string, interval, keep time.Duration) (*Scrape, error) {
	r, ok := presetRules[preset]
	if !ok {
		return nil, fmt.Errorf("preset %q: want zeebe or proxy", preset)
	}
	return &Scrape{targets: targets, rules: r, families: r.families(), Interval: interval, Keep: keep,
		HTTP:  &http.Client{Timeout: max(interval, time.Second)},
		rings: map[string][]sample{}, errs: map[string]error{}}, nil
}

// Run scrapes every target every Interval until ctx ends.
func (s *Scrape) Run(ctx context.Context) {
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	var discovered time.Time
	every := s.DiscoverEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	for {
		if s.Discover != nil && time.Since(discovered) >= every {
			discovered = time.Now()
			s.discover(ctx)
		}
		s.ScrapeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// discover asks Discover for the targets; one it cannot ask keeps those
// it has (and says why in Fetch's error while it has none).
func (s *Scrape) discover(ctx context.Context) {
	targets, err := s.Discover(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
	if err != nil {
		return
	}
	keep := map[string]bool{}
	for _, tg := range targets {
		keep[tg.Name] = true
	}
	for name := range s.rings {
		if !keep[name] {
			delete(s.rings, name)
			delete(s.errs, name)
		}
	}
	s.targets = slices.Clone(targets)
}

// Targets are the targets scraped now.
func (s *Scrape) Targets() []Target {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.targets
}

// ScrapeOnce reads every target once, in parallel.
func (s *Scrape) ScrapeOnce(ctx context.Context) {
	var wg sync.WaitGroup
	for _, tg := range s.Targets() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			smp, err := s.scrape(ctx, tg)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.errs[tg.Name] = err
			if err != nil {
				return
			}
			ring := append(s.rings[tg.Name], smp)
			cut := 0
			for cut < len(ring) && smp.at.Sub(ring[cut].at) > s.Keep {
				cut++
			}
			s.rings[tg.Name] = ring[cut:]
		}()
	}
	wg.Wait()
}

// Sampled reports whether every target has answered at least n times
// within what the ring keeps.
func (s *Scrape) Sampled(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tg := range s.targets {
		if len(s.rings[tg.Name]) < n {
			return false
		}
	}
	return true
}

// Errors are the targets' last scrape errors (nil for those that answered).
func (s *Scrape) Errors() map[string]error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]error{}
	for k, v := range s.errs {
		if v != nil {
			out[k] = v
		}
	}
	return out
}

func (s *Scrape) scrape(ctx context.Context, tg Target) (sample, error) {
	fams, err := ReadFamilies(ctx, s.HTTP, tg.URL, s.families)
	if err != nil {
		return sample{}, err
	}
	return sample{at: time.Now(), shards: s.extract(tg.Name, fams)}, nil
}

// ReadMetrics reads one /metrics endpoint in Prometheus' text format.
func ReadMetrics(ctx context.Context, c *http.Client, u string) (map[string]*dto.MetricFamily, error) {
	return ReadFamilies(ctx, c, u, nil)
}

// ReadFamilies reads the named families of one /metrics endpoint (all of
// them when names is nil). The lines of the others are dropped before the
// parser sees them: parsing is most of what a scrape costs.
func ReadFamilies(ctx context.Context, c *http.Client, u string, names map[string]bool) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", u, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("scrape %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", u, resp.Status)
	}
	var page io.Reader = io.LimitReader(resp.Body, 64<<20)
	if names != nil {
		body, err := io.ReadAll(page)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %w", u, err)
		}
		kept := keepFamilies(body, names)
		if !hasSample(kept) {
			return nil, fmt.Errorf("scrape %s: none of %s in the page: is it the right /metrics endpoint?", u, strings.Join(slices.Sorted(maps.Keys(names)), ", "))
		}
		page = bytes.NewReader(kept)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(page)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", u, err)
	}
	return fams, nil
}

// keepFamilies keeps the lines of a text exposition that belong to the
// named families (a histogram's or summary's _bucket, _sum and _count
// samples with it), their HELP and TYPE included, in place.
func keepFamilies(page []byte, names map[string]bool) []byte {
	out := page[:0]
	for line := range bytes.Lines(page) {
		if name := familyOf(line); name != nil && (names[string(name)] || names[string(trimSampleSuffix(name))]) {
			out = append(out, line...)
		}
	}
	return out
}

// hasSample says whether a page has a line that is not a comment.
func hasSample(page []byte) bool {
	for line := range bytes.Lines(page) {
		if line = bytes.TrimSpace(line); len(line) > 0 && line[0] != '#' {
			return true
		}
	}
	return false
}

// familyOf is the metric name a line speaks of: a sample's, or the one a
// HELP or TYPE comment names; nil for other comments and blank lines.
func familyOf(line []byte) []byte {
	if comment, ok := bytes.CutPrefix(line, []byte("#")); ok {
		comment = bytes.TrimLeft(comment, " \t")
		kw, ok := bytes.CutPrefix(comment, []byte("HELP"))
		if !ok {
			if kw, ok = bytes.CutPrefix(comment, []byte("TYPE")); !ok {
				return nil
			}
		}
		line = bytes.TrimLeft(kw, " \t")
	}
	end := bytes.IndexAny(line, "{ \t\n")
	if end <= 0 {
		return nil
	}
	return line[:end]
}

func trimSampleSuffix(name []byte) []byte {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if t, ok := bytes.CutSuffix(name, []byte(suffix)); ok {
			return t
		}
	}
	return name
}

func (s *Scrape) extract(target string, fams map[string]*dto.MetricFamily) map[string]*values {
	out := map[string]*values{}
	shard := func(m *dto.Metric) *values {
		name := target
		if s.rules.group != "" {
			name = LabelValue(m, s.rules.group)
		}
		v := out[name]
		if v == nil {
			v = &values{buckets: map[float64]float64{}, has: map[string]bool{}}
			out[name] = v
		}
		return v
	}
	add := func(rules []rule, what string, sign float64, set func(*values, float64)) {
		for _, r := range rules {
			f := fams[r.metric]
			if f == nil {
				continue
			}
			for _, m := range f.GetMetric() {
				if !matches(m, r.match) {
					continue
				}
				v := shard(m)
				set(v, sign*SampleValue(m))
				v.has[what] = true
			}
		}
	}
	add(s.rules.created, "created", 1, func(v *values, x float64) { v.created += x })
	add(s.rules.completed, "completed", 1, func(v *values, x float64) { v.completed += x })
	add(s.rules.dropped, "dropped", 1, func(v *values, x float64) { v.dropped += x })
	add(s.rules.received, "received", 1, func(v *values, x float64) { v.received += x })
	add(s.rules.throttled, "throttled", 1, func(v *values, x float64) { v.throttled += x })
	add(s.rules.queueAdd, "queue", 1, func(v *values, x float64) { v.queue += x })
	add(s.rules.queueSub, "queue", -1, func(v *values, x float64) { v.queue += x })
	for _, name := range s.rules.latency {
		// 8.6 exported some timers as summaries: no buckets, no latency.
		f := fams[name]
		if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range f.GetMetric() {
			v := shard(m)
			inf := false
			for _, b := range m.GetHistogram().GetBucket() {
				v.buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				inf = inf || math.IsInf(b.GetUpperBound(), 1)
			}
			if !inf { // the +Inf bucket is the sample count
				v.buckets[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
			}
			v.has["latency"] = true
			v.names = generation[name]
		}
		break
	}
	return out
}

// LabelValue is the value of a sample's label, "" when it has none.
func LabelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func matches(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		if LabelValue(m, k) != v {
			return false
		}
	}
	return true
}

// SampleValue is a counter's, gauge's or untyped sample's value.
func SampleValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// Fetch computes every shard's series over the window from the ring: at
// each step, rates between the samples nearest the step's two ends (a
// counter that went down restarted), the queue's latest value, and the
// histogram's increase per bucket.
func (s *Scrape) Fetch(_ context.Context, now time.Time, window, step time.Duration) ([]signals.Shard, error) {
	s.mu.Lock()
	rings := map[string][]sample{}
	for k, v := range s.rings {
		rings[k] = v
	}
	errs := map[string]error{}
	for k, v := range s.errs {
		errs[k] = v
	}
	targets, discoverErr := s.targets, s.lastErr
	s.mu.Unlock()
	if len(targets) == 0 {
		if discoverErr != nil {
			return nil, fmt.Errorf("find the shards to scrape: %w", discoverErr)
		}
		return nil, errors.New("no shard to scrape yet")
	}
	shards := map[string]*signals.Shard{}
	usable := 0
	// A sample older than this says nothing of a step: a target that
	// stopped answering leaves its series ending where it stopped, as
	// Prometheus's staleness does, instead of repeating its last value.
	maxAge := 3 * max(step, s.Interval)
	for _, tg := range targets {
		ring := rings[tg.Name]
		err := errs[tg.Name]
		if len(ring) < 2 {
			if err != nil && s.rules.group == "" {
				// A target that is a shard and does not answer is a
				// shard with no data, not a shard left out.
				shards[tg.Name] = &signals.Shard{Name: tg.Name, Missing: err.Error()}
			}
			continue
		}
		usable++
		names := map[string]bool{}
		for _, smp := range ring {
			for n := range smp.shards {
				names[n] = true
			}
		}
		for n := range names {
			sh := shards[n]
			if sh == nil {
				sh = &signals.Shard{Name: n}
				shards[n] = sh
			}
			fill(sh, ring, n, now, window, step, maxAge)
			if err != nil {
				sh.Missing = err.Error()
			}
		}
	}
	if usable == 0 {
		var msgs []string
		for _, tg := range targets {
			if err := errs[tg.Name]; err != nil {
				msgs = append(msgs, err.Error())
			}
		}
		if len(msgs) > 0 {
			return nil, fmt.Errorf("no target answered twice yet: %s", strings.Join(msgs, "; "))
		}
		return nil, errors.New("no target scraped twice yet: rates need two samples")
	}
	return sorted(shards), nil
}

// Increase is how much a counter grew from before to after; one that
// went down restarted, from zero.
func Increase(before, after float64) float64 {
	if after < before {
		return after
	}
	return after - before
}

// at returns the last sample at or before t, if any.
func at(ring []sample, t time.Time) (sample, bool) {
	i := sort.Search(len(ring), func(i int) bool { return ring[i].at.After(t) })
	if i == 0 {
		return sample{}, false
	}
	return ring[i-1], true
}

func fill(sh *signals.Shard, ring []sample, name string, now time.Time, window, step, maxAge time.Duration) {
	first := now.Add(-window).Truncate(step)
	var bounds []float64
	for t := first; !t.After(now); t = t.Add(step) {
		b, okB := at(ring, t)
		a, okA := at(ring, t.Add(-step))
		if !okB || t.Sub(b.at) > maxAge {
			continue
		}
		vb := b.shards[name]
		if vb == nil {
			continue
		}
		sh.MetricNames = cmp.Or(vb.names, sh.MetricNames)
		if vb.has["queue"] {
			sh.Queue = append(sh.Queue, signals.Point{T: t, V: vb.queue})
		}
		if !okA || !b.at.After(a.at) {
			continue
		}
		va := a.shards[name]
		if va == nil {
			continue
		}
		dt := b.at.Sub(a.at).Seconds()
		rate := func(what string, x, y float64, dst *signals.Series) {
			if !va.has[what] || !vb.has[what] {
				return
			}
			*dst = append(*dst, signals.Point{T: t, V: Increase(x, y) / dt})
		}
		rate("created", va.created, vb.created, &sh.Created)
		rate("completed", va.completed, vb.completed, &sh.Completed)
		rate("dropped", va.dropped, vb.dropped, &sh.Dropped)
		rate("received", va.received, vb.received, &sh.Received)
		rate("throttled", va.throttled, vb.throttled, &sh.Throttled)
		if va.has["latency"] && vb.has["latency"] {
			if bounds == nil {
				for le := range vb.buckets {
					bounds = append(bounds, le)
				}
				sort.Float64s(bounds)
				sh.Latency.Bounds = bounds
			}
			inc := map[float64]float64{}
			for _, le := range bounds {
				inc[le] = Increase(va.buckets[le], vb.buckets[le])
			}
			sh.Latency.Times = append(sh.Latency.Times, t)
			sh.Latency.Counts = append(sh.Latency.Counts, perBucket(bounds, inc))
		}
	}
}
