package sim

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shardctl/shardctl/internal/physicaltenant"
)

// metrics uses the metric names and labels of the Zeebe version played
// (8.5's Prometheus client, or Micrometer's from 8.6: the latency and
// processing timers in _seconds, the pending-incidents gauge without
// _total, flow control; 8.10's physicalTenantId on partition metrics),
// so Zeebe's Grafana dashboard and shardctl's zeebe preset read a
// simulator unchanged.
type metrics struct {
	registry *prometheus.Registry

	elementEvents    *prometheus.CounterVec // action, type, partition
	executed         *prometheus.CounterVec // action, partition
	jobEvents        *prometheus.CounterVec // action, type, partition
	appended         *prometheus.GaugeVec   // partition
	committed        *prometheus.GaugeVec   // partition
	processed        *prometheus.GaugeVec   // partition
	latency          *prometheus.HistogramVec
	processing       *prometheus.HistogramVec // recordType, partition
	dropped          *prometheus.CounterVec   // partition
	received         *prometheus.CounterVec   // partition
	inflight         *prometheus.GaugeVec     // partition
	requestsLimit    *prometheus.GaugeVec     // partition
	incidentEvents   *prometheus.CounterVec   // action, partition
	pendingIncidents *prometheus.GaugeVec     // partition
	bufferedMessages *prometheus.GaugeVec     // partition
	exported         *prometheus.GaugeVec     // exporter, partition
	activatedPerPoll prometheus.Histogram
	longPolls        *prometheus.GaugeVec // type
	jobStreams       *prometheus.GaugeVec // type
	// Flow control (8.6+; nil before): the outcome of each user command,
	// and the write-rate limit's gauges (0: no limit set, as by default).
	flowControl *prometheus.CounterVec // context, outcome, partition
	flowGauges  []*prometheus.GaugeVec // partition
}

// Latency in seconds from a command being written to its processing: from
// a tenth of a millisecond (idle) to a minute (far past the knee).
var latencyBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func newMetrics(v Version) *metrics {
	timer, gauge := func(name string) string { return name }, func(name string) string { return name }
	if v.micrometer() {
		timer = func(name string) string { return name + "_seconds" }
		gauge = func(name string) string { return strings.TrimSuffix(name, "_total") }
	}
	m := &metrics{
		registry: prometheus.NewRegistry(),
		elementEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zeebe_element_instance_events_total", Help: "Number of process element instance events",
		}, []string{"action", "type", "partition"}),
		executed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zeebe_executed_instances_total", Help: "Number of executed (root) process instances",
		}, []string{"action", "partition"}),
		jobEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zeebe_job_events_total", Help: "Number of job events",
		}, []string{"action", "type", "partition"}),
		appended: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zeebe_log_appender_last_appended_position", Help: "The last appended position by the appender.",
		}, []string{"partition"}),
		committed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zeebe_log_appender_last_committed_position", Help: "The last committed position.",
		}, []string{"partition"}),
		processed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zeebe_stream_processor_last_processed_position", Help: "The last position the stream processor has processed.",
		}, []string{"partition"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: timer("zeebe_stream_processor_latency"), Help: "Time between a command is written until it is picked up for processing (in seconds)",
			Buckets: latencyBuckets,
		}, []string{"partition"}),
		processing: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: timer("zeebe_stream_processor_processing_duration"), Help: "Time for processing a record (in seconds)",
			Buckets: latencyBuckets,
		}, []string{"recordType", "partition"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zeebe_dropped_request_count_total", Help: "Number of requests dropped due to backpressure",
		}, []string{"partition"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zeebe_received_request_count_total", Help: "Number of requests received",
		}, []string{"partition"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zeebe_backpressure_inflight_requests_count", Help: "Current number of request inflight",
		}, []string{"partition"}),
		requestsLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zeebe_backpressure_requests_limit", Help: "Current limit for number of inflight requests",
		}, []string{"partition"}),
		incidentEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zeebe_incident_events_total", Help: "Number of incident events",
		}, []string{"action", "partition"}),
		pendingIncidents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: gauge("zeebe_pending_incidents_total"), Help: "Number of pending incidents",
		}, []string{"partition"}),
		bufferedMessages: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zeebe_buffered_messages_count", Help: "Current number of buffered messages.",
		}, []string{"partition"}),
		exported: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "zeebe_exporter_last_exported_position", Help: "The last exported position by exporter and partition.",
		}, []string{"exporter", "partition"}),
		activatedPerPoll: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shardctl_sim_activated_jobs_per_request", Help: "Jobs returned by one ActivateJobs request (not a Zeebe metric)",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128},
		}),
	}
	m.longPolls = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "zeebe_long_polling_queued_current", Help: "Number of long-polling ActivateJobs requests waiting, by job type",
	}, []string{"type"})
	// Not a Zeebe metric: the simulator's own view of job push.
	m.jobStreams = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shardctl_sim_job_streams_open", Help: "Open StreamActivatedJobs calls, by job type",
	}, []string{"type"})
	m.registry.MustRegister(m.longPolls, m.jobStreams, m.activatedPerPoll,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var partitions prometheus.Registerer = m.registry
	if v.physicalTenants() {
		partitions = prometheus.WrapRegistererWith(prometheus.Labels{physicaltenant.MetricLabel: physicaltenant.Default}, m.registry)
	}
	partitions.MustRegister(
		m.elementEvents, m.executed, m.jobEvents, m.appended, m.committed, m.processed,
		m.latency, m.processing, m.dropped, m.received, m.inflight, m.requestsLimit,
		m.incidentEvents, m.pendingIncidents, m.bufferedMessages, m.exported,
	)
	if v.micrometer() {
		m.flowControl = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "zeebe_flow_control_total", Help: "Records that passed or failed flow control, by context and outcome",
		}, []string{"context", "outcome", "partition"})
		partitions.MustRegister(m.flowControl)
		for _, g := range []struct{ name, help string }{
			{"zeebe_flow_control_write_rate_limit", "The current write-rate limit (0: none)"},
			{"zeebe_flow_control_write_rate_maximum", "The configured maximum write rate (0: none)"},
			{"zeebe_flow_control_exporting_rate", "The measured exporting rate"},
			{"zeebe_flow_control_partition_load", "The write rate over the write-rate limit (0 without limits)"},
		} {
			vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: g.name, Help: g.help}, []string{"partition"})
			partitions.MustRegister(vec)
			m.flowGauges = append(m.flowGauges, vec)
		}
	}
	return m
}

// partitionMetrics caches one partition's series so the processing loop
// does not hash label values for every record. Used only on the
// partition's goroutine.
type partitionMetrics struct {
	m         *metrics
	partition string
	elements  map[[2]string]prometheus.Counter
	jobs      map[[2]string]prometheus.Counter

	appended, committed, processed prometheus.Gauge
	latency                        prometheus.Observer
	commandDuration                prometheus.Observer
	dropped, received              prometheus.Counter
	accepted, refused, throttled   prometheus.Counter // flow control's outcomes (8.6+; nil before)
	inflight                       prometheus.Gauge
	pendingIncidents, buffered     prometheus.Gauge
	exported                       prometheus.Gauge // nil without an exporter
}

func (m *metrics) forPartition(id int32, limit int, writeRate float64, exporter string) *partitionMetrics {
	p := strconv.Itoa(int(id))
	pm := &partitionMetrics{
		m: m, partition: p,
		elements:         map[[2]string]prometheus.Counter{},
		jobs:             map[[2]string]prometheus.Counter{},
		appended:         m.appended.WithLabelValues(p),
		committed:        m.committed.WithLabelValues(p),
		processed:        m.processed.WithLabelValues(p),
		latency:          m.latency.WithLabelValues(p),
		commandDuration:  m.processing.WithLabelValues("COMMAND", p),
		dropped:          m.dropped.WithLabelValues(p),
		received:         m.received.WithLabelValues(p),
		inflight:         m.inflight.WithLabelValues(p),
		pendingIncidents: m.pendingIncidents.WithLabelValues(p),
		buffered:         m.bufferedMessages.WithLabelValues(p),
	}
	if exporter != "" {
		pm.exported = m.exported.WithLabelValues(exporter, p)
	}
	if m.flowControl != nil {
		pm.accepted = m.flowControl.WithLabelValues("userCommand", "accepted", p)
		pm.refused = m.flowControl.WithLabelValues("userCommand", "requestLimitExhausted", p)
		pm.throttled = m.flowControl.WithLabelValues("userCommand", "writeRateLimitExhausted", p)
		for _, g := range m.flowGauges {
			g.WithLabelValues(p).Set(0)
		}
		m.flowGauges[0].WithLabelValues(p).Set(writeRate) // the limit,
		m.flowGauges[1].WithLabelValues(p).Set(writeRate) // and its maximum: no throttling played
	}
	m.requestsLimit.WithLabelValues(p).Set(float64(limit))
	for _, a := range []string{"activated", "completed", "terminated"} {
		m.executed.WithLabelValues(a, p)
	}
	return pm
}

func (pm *partitionMetrics) element(action, elementType string) {
	k := [2]string{action, elementType}
	c, ok := pm.elements[k]
	if !ok {
		c = pm.m.elementEvents.WithLabelValues(action, elementType, pm.partition)
		pm.elements[k] = c
	}
	c.Inc()
	if elementType == "PROCESS" {
		pm.m.executed.WithLabelValues(action, pm.partition).Inc()
	}
}

// Job actions as Zeebe labels them.
const (
	jobCreated   = "created"
	jobActivated = "activated"
	jobTimedOut  = "timed out"
	jobCompleted = "completed"
	jobFailed    = "failed"
	jobCanceled  = "canceled"
	jobErrored   = "error thrown"
	jobNotified  = "workers notified"
	jobPushed    = "pushed"
)

func (pm *partitionMetrics) job(action, jobType string) {
	k := [2]string{action, jobType}
	c, ok := pm.jobs[k]
	if !ok {
		c = pm.m.jobEvents.WithLabelValues(action, jobType, pm.partition)
		pm.jobs[k] = c
	}
	c.Inc()
}

func (pm *partitionMetrics) incident(action string) {
	pm.m.incidentEvents.WithLabelValues(action, pm.partition).Inc()
}
