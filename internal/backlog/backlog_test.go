package backlog

import (
	"slices"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/source"
)

func s(name string, v float64, labels ...string) Sample {
	l := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return Sample{Name: name, Labels: l, Value: v}
}

// base is an idle two-partition shard: every required metric, all zero.
func base() []Sample {
	var out []Sample
	for _, p := range []string{"1", "2"} {
		out = append(out,
			s(metricInstances, 10, "action", "activated", "partition", p),
			s(metricInstances, 9, "action", "completed", "partition", p),
			s(metricInstances, 1, "action", "terminated", "partition", p),
			s(metricCommitted, 100, "partition", p), s(metricProcessed, 100, "partition", p),
			s(metricIncidents, 0, "partition", p), s(metricBuffered, 0, "partition", p))
	}
	return out
}

func TestFrom(t *testing.T) {
	exportLag := func(b Backlog) float64 {
		if b.ExportLag == nil {
			return -1
		}
		return *b.ExportLag
	}
	tests := []struct {
		name                      string
		samples                   []Sample
		empty, known              bool
		inFlight, lag, export     float64
		ended                     float64
		incidents, buffered, jobs float64
		missing                   []string
	}{
		{name: "idle", samples: base(), empty: true, known: true, export: -1, ended: 20},
		{name: "in flight", samples: append(base(), s(metricInstances, 3, "action", "activated", "partition", "1")), known: true, inFlight: 3, export: -1, ended: 20},
		{name: "a restarted counter never goes below zero", samples: append(base(), s(metricInstances, 50, "action", "completed", "partition", "2")),
			empty: true, known: true, export: -1, ended: 70},
		{name: "lag", samples: append(base(), s(metricCommitted, 107, "partition", "1")), known: true, lag: 7, export: -1, ended: 20},
		{name: "exporter behind", samples: append(base(), s(metricExported, 90, "exporter", "es", "partition", "1"), s(metricExported, 100, "exporter", "es", "partition", "2")),
			known: true, export: 10, ended: 20},
		{name: "exporter caught up", samples: append(base(), s(metricExported, 100, "exporter", "es", "partition", "1")), empty: true, known: true, ended: 20},
		{name: "incident and message", samples: append(base(), s(metricIncidents, 1, "partition", "2"), s(metricBuffered, 2, "partition", "1")),
			known: true, incidents: 1, buffered: 2, export: -1, ended: 20},
		{name: "buffered messages alone", samples: append(base(), s(metricBuffered, 3, "partition", "1")), empty: true, known: true, buffered: 3, export: -1, ended: 20},
		{name: "open jobs", samples: append(base(), s(metricJobs, 5, "action", "created", "type", "pay"), s(metricJobs, 3, "action", "completed", "type", "pay"),
			s(metricJobs, 1, "action", "canceled", "type", "pay"), s(metricJobs, 2, "action", "activated", "type", "pay")),
			empty: true, known: true, jobs: 1, export: -1, ended: 20},
		{name: "nothing at all", samples: nil, missing: required, export: -1},
		{name: "no incidents metric", samples: slices.DeleteFunc(base(), func(x Sample) bool { return x.Name == metricIncidents }),
			missing: []string{metricIncidents}, export: -1, ended: 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := From("blue-1", time.Unix(0, 0), tt.samples)
			if b.Empty() != tt.empty || b.Known() != tt.known {
				t.Errorf("empty %v known %v, want %v %v (%s)", b.Empty(), b.Known(), tt.empty, tt.known, b.Summary())
			}
			if b.InFlight != tt.inFlight || b.Lag != tt.lag || exportLag(b) != tt.export || b.Incidents != tt.incidents || b.Buffered != tt.buffered || b.Jobs() != tt.jobs {
				t.Errorf("got in flight %v lag %v export %v incidents %v buffered %v jobs %v", b.InFlight, b.Lag, exportLag(b), b.Incidents, b.Buffered, b.Jobs())
			}
			if b.Ended != tt.ended {
				t.Errorf("ended %v, want %v", b.Ended, tt.ended)
			}
			if !slices.Equal(b.Missing, tt.missing) {
				t.Errorf("missing %q, want %q", b.Missing, tt.missing)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	b := From("blue-1", time.Unix(0, 0), append(base(), s(metricInstances, 1, "action", "activated", "partition", "1"),
		s(metricIncidents, 1, "partition", "1"), s(metricJobs, 1, "action", "created", "type", "pay")))
	if got, want := b.Summary(), "1 instance in flight, 1 incident, lag 0, 1 job open (pay 1)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (Backlog{Error: "scrape x: connection refused"}).Summary(); got != "unknown: scrape x: connection refused" {
		t.Errorf("unreadable: %q", got)
	}
}

// The Micrometer generation (8.6+) names the pending-incidents gauge
// without _total, and 8.10 numbers each physical tenant's partitions
// from 1: the backlog reads the same either way and says which names it
// saw; neither name is no data, never zero incidents.
func TestFromBothGenerations(t *testing.T) {
	micrometer := func(samples []Sample) []Sample {
		out := slices.Clone(samples)
		for i := range out {
			if out[i].Name == metricIncidents {
				out[i].Name = metricIncidentsMicrometer
			}
		}
		return out
	}
	withIncident := append(base(), s(metricIncidents, 2, "partition", "1"))
	for _, tc := range []struct {
		name      string
		samples   []Sample
		names     string
		incidents float64
		known     bool
	}{
		{"8.5", withIncident, source.Names85, 2, true},
		{"8.6+", micrometer(withIncident), source.NamesMicrometer, 2, true},
		{"neither", slices.DeleteFunc(slices.Clone(withIncident), func(x Sample) bool { return x.Name == metricIncidents }), "", 0, false},
	} {
		b := From("s", time.Now(), tc.samples)
		if b.MetricNames != tc.names || b.Incidents != tc.incidents || b.Known() != tc.known || b.Empty() {
			t.Errorf("%s: names %q incidents %v known %v empty %v missing %v", tc.name, b.MetricNames, b.Incidents, b.Known(), b.Empty(), b.Missing)
		}
	}
	// The processing latency under either name, summed over partitions.
	for _, name := range []string{source.Latency85, source.LatencyMicrometer} {
		lat := append(base(), Sample{Name: name, Labels: map[string]string{"partition": "1"}, Sum: 1.5, Count: 300},
			Sample{Name: name, Labels: map[string]string{"partition": "2"}, Sum: 0.5, Count: 100})
		if b := From("s", time.Now(), lat); b.LatencySum != 2 || b.LatencyCount != 400 {
			t.Errorf("latency as %s: %v s over %v records, want 2 over 400", name, b.LatencySum, b.LatencyCount)
		}
	}
	// Two physical tenants, each with a partition 1: their lags add up.
	var tenants []Sample
	for _, tenant := range []string{"default", "eu"} {
		for _, x := range base()[:7] { // partition 1's series
			x.Labels = map[string]string{"physicalTenantId": tenant, "partition": "1", "action": x.Labels["action"]}
			tenants = append(tenants, x)
		}
	}
	tenants = append(tenants, s(metricCommitted, 105, "physicalTenantId", "default", "partition", "1"),
		s(metricCommitted, 110, "physicalTenantId", "eu", "partition", "1"), s(metricProcessed, 110, "physicalTenantId", "eu", "partition", "1"))
	if b := From("s", time.Now(), tenants); b.Lag != 5 || b.Ended != 20 {
		t.Errorf("two tenants: lag %v ended %v, want 5 (the default tenant's) and 20", b.Lag, b.Ended)
	}
}
