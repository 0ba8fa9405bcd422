// Package source fetches the series internal/signals reads: from a
// Prometheus server (its HTTP query API), or by scraping /metrics endpoints
// directly into a ring buffer when there is no server at all.
// Runtimes, probes, migrate and the commands share it, so it imports no
// runtime and none of the tools.
package source

import (
	"bytes"
	"fmt"
	"text/template"
	"time"

	"github.com/shardctl/shardctl/internal/yamlfile"
)

// Preset is the PromQL a Prometheus source runs, one query per signal.
// Templates see {{.GroupBy}} (the label that names a shard), {{.Rate}}
// (the range of rate()) and {{.Step}} (the range of increase() per step).
// An empty query leaves that signal out.
type Preset struct {
	Name      string `json:"name"`
	GroupBy   string `json:"groupBy"`
	Created   string `json:"created"`
	Completed string `json:"completed"`
	Queue     string `json:"queue"`
	Latency   string `json:"latency"` // by GroupBy and le: increases per step
	Dropped   string `json:"dropped"`
	Received  string `json:"received"`
	Throttled string `json:"throttled"` // refused at flow control's write-rate limit (8.6+)
}

// The two generations of Zeebe's metric names: 8.5's Prometheus client,
// and Micrometer's from 8.6 (timers in _seconds, a gauge's _total
// dropped). Readers take either and say which they found.
const (
	Names85         = "8.5"
	NamesMicrometer = "8.6+"
	// The stream processor's latency histogram under each.
	Latency85         = "zeebe_stream_processor_latency"
	LatencyMicrometer = "zeebe_stream_processor_latency_seconds"
)

// generation tells a family's generation by its name.
var generation = map[string]string{Latency85: Names85, LatencyMicrometer: NamesMicrometer}

// AutoGroup picks the shard label: `cluster` when the targets carry one,
// else `instance` (the scrape target).
const AutoGroup = ""

// Presets by name.
var Presets = map[string]Preset{
	// The expressions of Zeebe's own Grafana dashboard.
	"zeebe": {
		Name:      "zeebe",
		Created:   `sum by ({{.GroupBy}}) (rate(zeebe_element_instance_events_total{type="PROCESS",action="activated"}[{{.Rate}}]))`,
		Completed: `sum by ({{.GroupBy}}) (rate(zeebe_element_instance_events_total{type="PROCESS",action="completed"}[{{.Rate}}]))`,
		Queue:     `sum by ({{.GroupBy}}) (zeebe_log_appender_last_committed_position) - sum by ({{.GroupBy}}) (zeebe_stream_processor_last_processed_position)`,
		// 8.5's histogram or Micrometer's (8.6+), as Camunda's own dashboard reads it.
		Latency:  `sum by ({{.GroupBy}}, le) (increase(zeebe_stream_processor_latency_seconds_bucket[{{.Step}}])) or sum by ({{.GroupBy}}, le) (increase(zeebe_stream_processor_latency_bucket[{{.Step}}]))`,
		Dropped:  `sum by ({{.GroupBy}}) (rate(zeebe_dropped_request_count_total[{{.Rate}}]))`,
		Received: `sum by ({{.GroupBy}}) (rate(zeebe_received_request_count_total[{{.Rate}}]))`,
		// Flow control's outcomes: 8.8's name or 8.6's.
		Throttled: `sum by ({{.GroupBy}}) (rate(zeebe_flow_control_total{context="userCommand",outcome="writeRateLimitExhausted"}[{{.Rate}}])) or sum by ({{.GroupBy}}) (rate(zeebe_flow_control_outcome_total{context="userCommand",outcome="writeRateLimitExhausted"}[{{.Rate}}]))`,
	},
	// shardctl's proxy, per shard: what it placed, what shards refused,
	// what it has in flight to them. Completions are not the proxy's to
	// see: use the zeebe preset for the scissors.
	"proxy": {
		Name:     "proxy",
		GroupBy:  "shard",
		Created:  `sum by ({{.GroupBy}}) (rate(shardctl_proxy_p2c_choices_total[{{.Rate}}]))`,
		Queue:    `sum by ({{.GroupBy}}) (shardctl_proxy_shard_inflight_requests)`,
		Dropped:  `sum by ({{.GroupBy}}) (rate(shardctl_proxy_shard_requests_total{code="ResourceExhausted"}[{{.Rate}}]))`,
		Received: `sum by ({{.GroupBy}}) (rate(shardctl_proxy_shard_requests_total[{{.Rate}}]))`,
	},
}

// LoadPreset returns a named preset with the overrides of a YAML file
// (any of the Preset fields; unknown fields are errors).
func LoadPreset(name, file string) (Preset, error) {
	p, ok := Presets[name]
	if !ok {
		return Preset{}, fmt.Errorf("preset %q: want zeebe or proxy", name)
	}
	if file == "" {
		return p, nil
	}
	var o Preset
	if err := yamlfile.Read(file, &o); err != nil {
		return Preset{}, fmt.Errorf("queries file: %w", err)
	}
	for _, f := range []struct{ dst, src *string }{
		{&p.GroupBy, &o.GroupBy}, {&p.Created, &o.Created}, {&p.Completed, &o.Completed}, {&p.Queue, &o.Queue},
		{&p.Latency, &o.Latency}, {&p.Dropped, &o.Dropped}, {&p.Received, &o.Received}, {&p.Throttled, &o.Throttled},
	} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}
	if err := p.check(); err != nil {
		return Preset{}, fmt.Errorf("queries file %s: %w", file, err)
	}
	return p, nil
}

// check renders every template once, so a typo fails at start.
func (p Preset) check() error {
	for name, q := range p.queries() {
		if _, err := render(q, "x", time.Minute, time.Minute); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (p Preset) queries() map[string]string {
	out := map[string]string{}
	for k, v := range map[string]string{"created": p.Created, "completed": p.Completed, "queue": p.Queue,
		"latency": p.Latency, "dropped": p.Dropped, "received": p.Received, "throttled": p.Throttled} {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

func render(q, group string, rate, step time.Duration) (string, error) {
	t, err := template.New("q").Option("missingkey=error").Parse(q)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	err = t.Execute(&b, map[string]string{"GroupBy": group, "Rate": promDuration(rate), "Step": promDuration(step)})
	return b.String(), err
}

// promDuration writes a duration as PromQL reads it: 90s, 5m, 1h.
func promDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s <= 0:
		return "1s"
	case s%3600 == 0:
		return fmt.Sprintf("%dh", s/3600)
	case s%60 == 0:
		return fmt.Sprintf("%dm", s/60)
	}
	return fmt.Sprintf("%ds", s)
}
