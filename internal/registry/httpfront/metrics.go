package httpfront

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the registry's Prometheus metrics.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	watchers prometheus.Gauge
}

// NewMetrics registers the registry's metrics; the gauges are read from r
// at scrape time, so they cannot drift from what the registry holds.
func NewMetrics(r Registry) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_registry_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "shardctl_registry_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"route"}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardctl_registry_watchers", Help: "Open watch streams.",
		}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.watchers, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(registryCollector{r})
	return m
}

func (m *Metrics) observe(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

var (
	descInstances = prometheus.NewDesc("shardctl_registry_instances", "Registered instances by app and status.", []string{"app", "status"}, nil)
	descExpected  = prometheus.NewDesc("shardctl_registry_expected_renewals_per_minute", "Renewals per minute the registered leases should send.", nil, nil)
	descThreshold = prometheus.NewDesc("shardctl_registry_renewal_threshold_per_minute", "Renewals per minute below which self-preservation holds eviction.", nil, nil)
	descRenewals  = prometheus.NewDesc("shardctl_registry_renewals_last_minute", "Renewals received in the last minute.", nil, nil)
	descPreserve  = prometheus.NewDesc("shardctl_registry_self_preservation", "1 while self-preservation holds eviction.", nil, nil)
	descEvicted   = prometheus.NewDesc("shardctl_registry_evictions_total", "Instances evicted after their lease expired.", nil, nil)
	descVersion   = prometheus.NewDesc("shardctl_registry_version", "The registry's change counter.", nil, nil)
	descLedger    = prometheus.NewDesc("shardctl_registry_ledger_deployments", "Deployments in the ledger.", nil, nil)
	descReplica   = prometheus.NewDesc("shardctl_registry_replica_info", "This replica over etcd, and the coordinator it sees (1).", []string{"replica", "coordinator"}, nil)
	descCoord     = prometheus.NewDesc("shardctl_registry_coordinator", "1 while this replica is the coordinator (it evicts).", nil, nil)
	descReplicas  = prometheus.NewDesc("shardctl_registry_replicas", "Replicas alive in etcd.", nil, nil)
	descStale     = prometheus.NewDesc("shardctl_registry_staleness_seconds", "How far behind etcd this replica's view may be.", nil, nil)
)

type registryCollector struct{ r Registry }

func (c registryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInstances, descExpected, descThreshold, descRenewals, descPreserve, descEvicted, descVersion, descLedger, descReplica, descCoord, descReplicas, descStale} {
		ch <- d
	}
}

func (c registryCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[[2]string]int{}
	for _, in := range c.r.Instances("") {
		counts[[2]string{in.App, string(in.EffectiveStatus())}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descInstances, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	h := c.r.Status()
	preserving := 0.0
	if h.SelfPreserving {
		preserving = 1
	}
	ch <- prometheus.MustNewConstMetric(descExpected, prometheus.GaugeValue, h.ExpectedRenewalsPerMinute)
	ch <- prometheus.MustNewConstMetric(descThreshold, prometheus.GaugeValue, h.RenewalThreshold)
	ch <- prometheus.MustNewConstMetric(descRenewals, prometheus.GaugeValue, h.RenewalsLastMinute)
	ch <- prometheus.MustNewConstMetric(descPreserve, prometheus.GaugeValue, preserving)
	ch <- prometheus.MustNewConstMetric(descEvicted, prometheus.CounterValue, float64(h.Evicted))
	ch <- prometheus.MustNewConstMetric(descVersion, prometheus.GaugeValue, float64(h.Version))
	ch <- prometheus.MustNewConstMetric(descLedger, prometheus.GaugeValue, float64(h.Deployments))
	if rs := h.Replica; rs != nil {
		coord := 0.0
		if rs.IsCoordinator {
			coord = 1
		}
		ch <- prometheus.MustNewConstMetric(descReplica, prometheus.GaugeValue, 1, rs.ID, rs.Coordinator)
		ch <- prometheus.MustNewConstMetric(descCoord, prometheus.GaugeValue, coord)
		ch <- prometheus.MustNewConstMetric(descReplicas, prometheus.GaugeValue, float64(len(rs.Members)))
		ch <- prometheus.MustNewConstMetric(descStale, prometheus.GaugeValue, c.r.Replica().Staleness().Seconds())
	}
}
