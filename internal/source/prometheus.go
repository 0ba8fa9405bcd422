package source

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/shardctl/shardctl/internal/signals"
)

// Source fetches every shard's series over a window ending now, at step.
type Source interface {
	Fetch(ctx context.Context, now time.Time, window, step time.Duration) ([]signals.Shard, error)
}

// Prometheus reads a Prometheus server's query_range API.
type Prometheus struct {
	api    v1.API
	preset Preset
	// group is the shard label once found: the targets' labels do not
	// change between fetches.
	mu    sync.Mutex
	group string
	// Rate is the range of rate(); 0 picks max(4 steps, 30 s) so that a
	// rate always spans several scrapes.
	Rate time.Duration
}

// NewPrometheus connects to a server (nothing is sent until Fetch).
func NewPrometheus(url string, p Preset) (*Prometheus, error) {
	c, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		return nil, fmt.Errorf("prometheus %q: %w", url, err)
	}
	return &Prometheus{api: v1.NewAPI(c), preset: p}, nil
}

func (p *Prometheus) groupBy(ctx context.Context, now time.Time) (string, error) {
	if p.preset.GroupBy != AutoGroup {
		return p.preset.GroupBy, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.group != "" {
		return p.group, nil
	}
	// A position every partition reports from its start: an idle cluster
	// has no element-instance series yet.
	v, _, _, err := p.api.Query(ctx, `count by (cluster) (zeebe_stream_processor_last_processed_position)`, now)
	if err != nil {
		return "", fmt.Errorf("prometheus: %w", err)
	}
	vec, _ := v.(model.Vector)
	group := "instance"
	for _, s := range vec {
		if s.Metric["cluster"] != "" {
			group = "cluster"
		}
	}
	if len(vec) > 0 { // decided only once there are targets to decide by
		p.group = group
	}
	return group, nil
}

// Fetch runs every query of the preset over the window.
func (p *Prometheus) Fetch(ctx context.Context, now time.Time, window, step time.Duration) ([]signals.Shard, error) {
	group, err := p.groupBy(ctx, now)
	if err != nil {
		return nil, err
	}
	rate := p.Rate
	if rate == 0 {
		rate = max(4*step, 30*time.Second)
	}
	r := v1.Range{Start: now.Add(-window), End: now, Step: step}
	shards := map[string]*signals.Shard{}
	shard := func(name string) *signals.Shard {
		s := shards[name]
		if s == nil {
			s = &signals.Shard{Name: name}
			shards[name] = s
		}
		return s
	}
	for name, q := range p.preset.queries() {
		query, err := render(q, group, rate, step)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", name, err)
		}
		v, _, _, err := p.api.QueryRange(ctx, query, r)
		if err != nil {
			return nil, fmt.Errorf("prometheus query %s: %w", name, err)
		}
		m, ok := v.(model.Matrix)
		if !ok {
			return nil, fmt.Errorf("prometheus query %s: want a range vector, got %s", name, v.Type())
		}
		if name == "latency" {
			for g, h := range heatmaps(m, model.LabelName(group)) {
				shard(g).Latency = h
			}
			continue
		}
		for _, ss := range m {
			s := shard(string(ss.Metric[model.LabelName(group)]))
			series := make(signals.Series, 0, len(ss.Values))
			for _, v := range ss.Values {
				if !math.IsNaN(float64(v.Value)) {
					series = append(series, signals.Point{T: v.Timestamp.Time(), V: float64(v.Value)})
				}
			}
			switch name {
			case "created":
				s.Created = series
			case "completed":
				s.Completed = series
			case "queue":
				s.Queue = series
			case "dropped":
				s.Dropped = series
			case "received":
				s.Received = series
			case "throttled":
				s.Throttled = series
			}
		}
	}
	return sorted(shards), nil
}

func sorted(m map[string]*signals.Shard) []signals.Shard {
	out := make([]signals.Shard, 0, len(m))
	for _, s := range m {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// heatmaps turns increases of cumulative buckets (by group and le) into
// per-bucket counts over time, per group.
func heatmaps(m model.Matrix, group model.LabelName) map[string]signals.Heatmap {
	type key struct {
		g string
		t int64
	}
	cum := map[key]map[float64]float64{}
	bounds := map[string]map[float64]bool{}
	times := map[string]map[int64]bool{}
	for _, ss := range m {
		g := string(ss.Metric[group])
		le, err := strconv.ParseFloat(string(ss.Metric["le"]), 64)
		if err != nil {
			continue
		}
		if bounds[g] == nil {
			bounds[g], times[g] = map[float64]bool{}, map[int64]bool{}
		}
		bounds[g][le] = true
		for _, v := range ss.Values {
			k := key{g, int64(v.Timestamp)}
			if cum[k] == nil {
				cum[k] = map[float64]float64{}
			}
			cum[k][le] = float64(v.Value)
			times[g][int64(v.Timestamp)] = true
		}
	}
	out := map[string]signals.Heatmap{}
	for g := range bounds {
		var h signals.Heatmap
		for b := range bounds[g] {
			h.Bounds = append(h.Bounds, b)
		}
		sort.Float64s(h.Bounds)
		var ts []int64
		for t := range times[g] {
			ts = append(ts, t)
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		for _, t := range ts {
			h.Times = append(h.Times, model.Time(t).Time())
			h.Counts = append(h.Counts, perBucket(h.Bounds, cum[key{g, t}]))
		}
		out[g] = h
	}
	return out
}

// perBucket turns cumulative counts by upper bound into counts per bucket.
func perBucket(bounds []float64, cum map[float64]float64) []float64 {
	out := make([]float64, len(bounds))
	prev := 0.0
	for i, b := range bounds {
		c := cum[b]
		if math.IsNaN(c) {
			c = prev
		}
		out[i] = max(0, c-prev)
		prev = max(prev, c)
	}
	return out
}
