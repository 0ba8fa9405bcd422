package backlog

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/shardctl/shardctl/internal/source"
)

// Target is a shard to read: its id and, when the registry knows it, the
// URL of its /metrics.
type Target struct {
	Shard, MetricsURL string
}

// Reader reads a shard's backlog. A failure is in the Backlog (Error,
// Missing), never a silent zero.
type Reader interface {
	Read(ctx context.Context, t Target) Backlog
}

// Scrape reads a shard's /metrics directly: the URL given for it, else
// the one its registration names.
type Scrape struct {
	HTTP *http.Client
	URLs map[string]string // by shard id, e.g. from --scrape SHARD=URL
}

func (s Scrape) Read(ctx context.Context, t Target) Backlog {
	now := time.Now()
	u := t.MetricsURL
	if v, ok := s.URLs[t.Shard]; ok {
		u = v
	}
	if u == "" {
		return Backlog{Shard: t.Shard, At: now, Error: "no metrics URL: its registration names none; give --scrape " + t.Shard + "=URL or --prometheus URL"}
	}
	c := s.HTTP
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	fams, err := source.ReadMetrics(ctx, c, u)
	if err != nil {
		return Backlog{Shard: t.Shard, At: now, Error: err.Error()}
	}
	var samples []Sample
	for _, name := range Metrics {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			sample := Sample{Name: name, Labels: labels, Value: source.SampleValue(m)}
			switch {
			case m.Histogram != nil:
				sample.Sum, sample.Count = m.GetHistogram().GetSampleSum(), float64(m.GetHistogram().GetSampleCount())
			case m.Summary != nil:
				sample.Sum, sample.Count = m.GetSummary().GetSampleSum(), float64(m.GetSummary().GetSampleCount())
			}
			samples = append(samples, sample)
		}
	}
	return From(t.Shard, now, samples)
}

// Prometheus reads a shard's series from a Prometheus server: those whose
// cluster label is the shard id, else (targets without a cluster label)
// those whose instance is the host:port of the shard's /metrics.
type Prometheus struct {
	api v1.API
}

// NewPrometheus connects to a server (nothing is sent until Read).
func NewPrometheus(addr string) (*Prometheus, error) {
	c, err := api.NewClient(api.Config{Address: addr})
	if err != nil {
		return nil, fmt.Errorf("prometheus %q: %w", addr, err)
	}
	return &Prometheus{api: v1.NewAPI(c)}, nil
}

func (p *Prometheus) Read(ctx context.Context, t Target) Backlog {
	now := time.Now()
	selectors := [][2]string{{"cluster", t.Shard}}
	if u, err := url.Parse(t.MetricsURL); err == nil && u.Host != "" {
		selectors = append(selectors, [2]string{"instance", u.Host})
	}
	var samples []Sample
	for _, sel := range selectors {
		q := fmt.Sprintf(`{__name__=~%q,%s=%q}`, strings.Join(slices.Concat(Metrics, latencySeries), "|"), sel[0], sel[1])
		v, _, _, err := p.api.Query(ctx, q, now)
		if err != nil {
			return Backlog{Shard: t.Shard, At: now, Error: fmt.Sprintf("prometheus: %v", err)}
		}
		vec, _ := v.(model.Vector)
		for _, s := range vec {
			labels := map[string]string{}
			for k, v := range s.Metric {
				labels[string(k)] = string(v)
			}
			samples = append(samples, seriesSample(labels[model.MetricNameLabel], labels, float64(s.Value)))
		}
		if len(samples) > 0 {
			break
		}
	}
	b := From(t.Shard, now, samples)
	if len(samples) == 0 {
		b.Error = fmt.Sprintf("prometheus has no series of %s with cluster=%q", strings.Join(required, ", "), t.Shard)
	}
	return b
}

// IncidentLister lists a shard's open incidents by key, where the shard
// can tell (the simulator's /incidents; a Zeebe cluster shows them in
// Operate, not in its metrics).
type IncidentLister interface {
	IncidentKeys(ctx context.Context, t Target) ([]int64, error)
}

// IncidentKeys asks the host of the shard's /metrics for /incidents.
func (s Scrape) IncidentKeys(ctx context.Context, t Target) ([]int64, error) {
	u := t.MetricsURL
	if v, ok := s.URLs[t.Shard]; ok {
		u = v
	}
	base, err := url.Parse(u)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("no metrics URL for %s", t.Shard)
	}
	base.Path, base.RawQuery = "/incidents", ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.String(), nil)
	if err != nil {
		return nil, err
	}
	c := s.HTTP
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", base, resp.Status)
	}
	var doc struct {
		Incidents []struct {
			Key int64 `json:"key"`
		} `json:"incidents"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", base, err)
	}
	keys := make([]int64, 0, len(doc.Incidents))
	for _, in := range doc.Incidents {
		keys = append(keys, in.Key)
	}
	return keys, nil
}

// latencySeries are the latency's sum and count as Prometheus stores
// them, a series each.
var latencySeries = []string{
	metricLatency + "_sum", metricLatency + "_count",
	source.LatencyMicrometer + "_sum", source.LatencyMicrometer + "_count",
}

// seriesSample is one Prometheus series as a sample: a latency's _sum or
// _count series is its family's sum or count.
func seriesSample(name string, labels map[string]string, v float64) Sample {
	if base, ok := strings.CutSuffix(name, "_sum"); ok && slices.Contains(latencySeries, name) {
		return Sample{Name: base, Labels: labels, Sum: v}
	}
	if base, ok := strings.CutSuffix(name, "_count"); ok && slices.Contains(latencySeries, name) {
		return Sample{Name: base, Labels: labels, Count: v}
	}
	return Sample{Name: name, Labels: labels, Value: v}
}
