// Package backlog reads what a shard still holds, the work a drain waits
// for, from the shard's own metrics under Zeebe's names: root instances
// in flight, records not yet processed or exported, open incidents,
// buffered messages and unfinished jobs. Missing data is never read as
// empty: a metric that cannot be read is named in Missing and the shard
// is not empty.
// Runtimes, probes and migrate share it, so it imports no runtime and none
// of the tools, only internal/human and internal/source.
package backlog

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/source"
)

// The Zeebe metrics a backlog is read from.
const (
	metricInstances = "zeebe_executed_instances_total"                 // action, partition
	metricCommitted = "zeebe_log_appender_last_committed_position"     // partition
	metricProcessed = "zeebe_stream_processor_last_processed_position" // partition
	metricExported  = "zeebe_exporter_last_exported_position"          // exporter, partition
	metricIncidents = "zeebe_pending_incidents_total"                  // partition
	metricBuffered  = "zeebe_buffered_messages_count"                  // partition
	metricJobs      = "zeebe_job_events_total"                         // action, type, partition
	// The stream processor's latency, written to processed: a histogram
	// (a summary in some 8.6 releases); its _sum and _count are read.
	metricLatency = source.Latency85
	// Since Micrometer (8.6+) a gauge loses the _total its name ended in.
	metricIncidentsMicrometer = "zeebe_pending_incidents"
)

// Metrics are the names a reader asks for, both generations of them.
var Metrics = []string{metricInstances, metricCommitted, metricProcessed, metricExported, metricIncidents, metricIncidentsMicrometer, metricBuffered, metricJobs,
	metricLatency, source.LatencyMicrometer}

// canonical is the name a sample is read under: the 8.5 one.
func canonical(name string) (string, string) {
	if name == metricIncidentsMicrometer {
		return metricIncidents, source.NamesMicrometer
	}
	if name == metricIncidents {
		return name, source.Names85
	}
	if name == source.LatencyMicrometer {
		return metricLatency, source.NamesMicrometer
	}
	return name, ""
}

// required are the metrics without which a shard cannot be called empty.
// Exporters are optional (a shard may export nothing); job events appear
// only once there was a job.
var required = []string{metricInstances, metricCommitted, metricProcessed, metricIncidents, metricBuffered}

// Backlog is what one shard holds at one moment.
type Backlog struct {
	Shard string    `json:"shard"`
	At    time.Time `json:"at"`
	// InFlight is root instances activated and neither completed nor
	// terminated, summed over partitions. The counters restart when a
	// partition's leader changes, so Lag must be zero too.
	InFlight float64 `json:"inFlight"`
	// Ended counts root instances completed or terminated so far, summed
	// over partitions (a counter: it restarts with a partition's leader).
	// The proxy reads a shard's completion rate from two readings.
	Ended float64 `json:"-"`
	// Lag is records committed and not yet processed.
	Lag float64 `json:"lag"`
	// JobsEnded counts jobs completed, canceled or ended by an error so
	// far, of every type but UserTaskJobType (a counter).
	JobsEnded float64 `json:"-"`
	// Committed and Processed are the log positions summed over
	// partitions, Created the root instances activated so far, and
	// LatencySum and LatencyCount the stream processor's latency so far
	// (seconds, records): the proxy reads rates from two readings.
	Committed, Processed, Created float64 `json:"-"`
	LatencySum, LatencyCount      float64 `json:"-"`
	// ExportLag is records committed and not yet exported by the slowest
	// exporter; null when the shard exports nothing.
	ExportLag *float64 `json:"exportLag"`
	Incidents float64  `json:"incidents"`
	Buffered  float64  `json:"bufferedMessages"`
	// MetricNames is the generation of Zeebe's metric names the shard
	// exports (source.Names85 or source.NamesMicrometer), "" when not seen.
	MetricNames string `json:"metricNames,omitempty"`
	// OpenJobs are jobs created and not completed, canceled or ended by an
	// error, by job type (only types with some open).
	OpenJobs map[string]float64 `json:"openJobs"`
	// Activated counts jobs activated so far by type: a drain compares two
	// readings to see whether workers take a type at all.
	Activated map[string]float64 `json:"-"`
	// Missing names what could not be read; Error says why a shard could
	// not be read at all.
	Missing []string `json:"missing,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// LagKnown reports whether Lag was read: the committed and processed
// positions of every partition.
func (b Backlog) LagKnown() bool {
	return b.Error == "" && !slices.Contains(b.Missing, metricCommitted) && !slices.Contains(b.Missing, metricProcessed)
}

// InstancesKnown reports whether InFlight and Ended were read.
func (b Backlog) InstancesKnown() bool {
	return b.Error == "" && !slices.Contains(b.Missing, metricInstances)
}

// Known reports whether every required metric was read.
func (b Backlog) Known() bool { return b.Error == "" && len(b.Missing) == 0 }

// Empty reports whether the shard holds nothing: every required metric
// read; no instance in flight, no lag, no incident.
//
// Buffered messages do not count once nothing is in flight: a draining
// shard starts no instance, so a message buffered there can correlate
// with nothing; and the proxy sends catch messages to every shard that
// may hold a waiting instance, so a drained shard keeps buffering copies
// of messages meant for the other pool until their TTL ends. Waiting for
// them would keep a drain under message traffic from ever ending.
func (b Backlog) Empty() bool {
	return b.Known() && b.InFlight == 0 && b.Lag == 0 && (b.ExportLag == nil || *b.ExportLag == 0) && b.Incidents == 0
}

// Jobs is the number of open jobs of every type.
func (b Backlog) Jobs() float64 {
	var n float64
	for _, v := range b.OpenJobs {
		n += v
	}
	return n
}

// Sample is one series' value: a metric name, its labels, its value;
// a histogram's or a summary's sum and count.
type Sample struct {
	Name       string
	Labels     map[string]string
	Value      float64
	Sum, Count float64
}

// UserTaskJobType is the job type of Zeebe's job-based user tasks: a
// person works them, so an open one waits on purpose.
const UserTaskJobType = "io.camunda.zeebe:userTask"

// WorkerJobs are the open jobs job workers have to do: every type but
// UserTaskJobType.
func (b Backlog) WorkerJobs() float64 {
	return b.Jobs() - b.OpenJobs[UserTaskJobType]
}

// jobTerminal are the job events after which a job is gone.
var jobTerminal = []string{"completed", "canceled", "error thrown"}

// From computes a shard's backlog from its samples.
func From(shard string, at time.Time, samples []Sample) Backlog {
	b := Backlog{Shard: shard, At: at, OpenJobs: map[string]float64{}, Activated: map[string]float64{}}
	seen := map[string]bool{}
	type pk struct{ partition, extra string }
	instances := map[pk]float64{} // by partition and action
	committed, processed := map[string]float64{}, map[string]float64{}
	exported := map[pk]float64{} // by partition and exporter
	jobs := map[string]float64{} // by type: created − terminal
	for _, s := range samples {
		name, names := canonical(s.Name)
		seen[name] = true
		if names != "" {
			b.MetricNames = names
		}
		// 8.10's physical tenants each have partitions from 1.
		p := s.Labels["partition"]
		if t := s.Labels[physicaltenant.MetricLabel]; t != "" {
			p = t + "/" + p
		}
		switch name {
		case metricInstances:
			instances[pk{p, s.Labels["action"]}] += s.Value
		case metricCommitted:
			committed[p] = max(committed[p], s.Value)
		case metricProcessed:
			processed[p] = max(processed[p], s.Value)
		case metricExported:
			exported[pk{p, s.Labels["exporter"]}] = s.Value
		case metricIncidents:
			b.Incidents += s.Value
		case metricBuffered:
			b.Buffered += s.Value
		case metricLatency:
			b.LatencySum += s.Sum
			b.LatencyCount += s.Count
		case metricJobs:
			typ := s.Labels["type"]
			switch action := s.Labels["action"]; {
			case action == "created":
				jobs[typ] += s.Value
			case action == "activated":
				b.Activated[typ] += s.Value
			case slices.Contains(jobTerminal, action):
				jobs[typ] -= s.Value
				if typ != UserTaskJobType {
					b.JobsEnded += s.Value
				}
			}
		}
	}
	for _, m := range required {
		if !seen[m] {
			b.Missing = append(b.Missing, m)
		}
	}
	partitions := map[string]bool{}
	for k := range instances {
		partitions[k.partition] = true
	}
	for p := range partitions {
		// A counter that restarted can read below what it lost: never
		// count a partition below zero.
		ended := instances[pk{p, "completed"}] + instances[pk{p, "terminated"}]
		b.InFlight += max(0, instances[pk{p, "activated"}]-ended)
		b.Ended += ended
		b.Created += instances[pk{p, "activated"}]
	}
	for p, c := range committed {
		b.Lag += max(0, c-processed[p])
		b.Committed += c
		b.Processed += processed[p]
	}
	if len(exported) > 0 {
		var lag float64
		for k, e := range exported {
			lag = max(lag, committed[k.partition]-e)
		}
		b.ExportLag = &lag
	}
	for typ, n := range jobs {
		if n > 0 {
			b.OpenJobs[typ] = n
		}
	}
	return b
}

// Summary says in one line what the shard still holds.
func (b Backlog) Summary() string {
	if b.Error != "" {
		return "unknown: " + b.Error
	}
	var parts []string
	if len(b.Missing) > 0 {
		parts = append(parts, "no data for "+strings.Join(b.Missing, ", "))
	}
	parts = append(parts, fmt.Sprintf("%s in flight", human.Plural(b.InFlight, "instance")),
		human.Plural(b.Incidents, "incident"), fmt.Sprintf("lag %.0f", b.Lag))
	if b.ExportLag != nil {
		parts = append(parts, fmt.Sprintf("export lag %.0f", *b.ExportLag))
	}
	if b.Buffered > 0 {
		parts = append(parts, human.Plural(b.Buffered, "buffered message"))
	}
	if n := b.Jobs(); n > 0 {
		var types []string
		for _, t := range slices.Sorted(maps.Keys(b.OpenJobs)) {
			types = append(types, fmt.Sprintf("%s %.0f", t, b.OpenJobs[t]))
		}
		parts = append(parts, fmt.Sprintf("%s open (%s)", human.Plural(n, "job"), strings.Join(types, ", ")))
	}
	return strings.Join(parts, ", ")
}
