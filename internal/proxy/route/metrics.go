package route

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/codes"
)

// Metrics are the proxy's Prometheus series: per RPC, per shard, per pool.
type Metrics struct {
	registry   *prometheus.Registry
	inflight   *prometheus.GaugeVec   // shard
	requests   *prometheus.CounterVec // rpc, code
	upstream   *prometheus.CounterVec // shard, rpc, code
	choices    *prometheus.CounterVec // shard
	coolingOff *prometheus.CounterVec // shard
	HandedBack *prometheus.CounterVec // shard, reason
	weights    *prometheus.GaugeVec   // pool
	up         *prometheus.GaugeVec   // shard
	// authRefused: 1 while a shard refuses the proxy's own credential
	authRefused *prometheus.GaugeVec // shard
	overloaded  *prometheus.GaugeVec // shard
	backlog     *prometheus.GaugeVec // shard
	// long polls and job streams a stopping proxy ended
	LongCallsEnded prometheus.Counter
	StreamsStalled prometheus.Counter
	// ClientsCutOff counts client connections the front ended or refused
	// for their conduct or its limits, by reason; ClientConns is how many
	// it serves; AcceptErrors the accepts that failed (out of
	// descriptors), each followed by a back-off.
	ClientsCutOff *prometheus.CounterVec
	ClientConns   prometheus.Gauge
	AcceptErrors  prometheus.Counter
	admitting     *prometheus.GaugeVec   // shard
	instances     *prometheus.GaugeVec   // shard
	instanceLimit *prometheus.GaugeVec   // shard
	queueDelay    *prometheus.GaugeVec   // shard
	admitRate     *prometheus.GaugeVec   // shard
	limited       *prometheus.CounterVec // shard
	checks        *prometheus.CounterVec // shard, result
	ejections     *prometheus.CounterVec // shard
	// ejections the max ejection percent refused, by shard
	ejectionsRefused *prometheus.CounterVec
	ledger           prometheus.GaugeFunc     // deployments
	duration         *prometheus.HistogramVec // rpc

	cache sync.Map // resolved series: rpcCode -> counter, rpc -> observer
}

// observe counts a client request, resolving each label set once.
func (m *Metrics) Observe(rpc string, code codes.Code, took time.Duration) {
	k := rpcCode{rpc, code}
	c, ok := m.cache.Load(k)
	if !ok {
		c = m.requests.WithLabelValues(rpc, code.String())
		m.cache.Store(k, c)
	}
	c.(prometheus.Counter).Inc()
	o, ok := m.cache.Load(rpc)
	if !ok {
		o = m.duration.WithLabelValues(rpc)
		m.cache.Store(rpc, o)
	}
	o.(prometheus.Observer).Observe(took.Seconds())
}

// newMetrics builds the proxy's metrics; ledgerSize, longCalls and
// registryReachable are read at each scrape.
func newMetrics(ledgerSize, longCalls, registryReachable func() float64) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_inflight_requests", Help: "Requests the proxy has in flight to each shard.",
		}, []string{"shard"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_requests_total", Help: "Client requests by RPC and gRPC status code.",
		}, []string{"rpc", "code"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_shard_requests_total", Help: "Requests sent to shards by shard, RPC and gRPC status code.",
		}, []string{"shard", "rpc", "code"}),
		choices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_p2c_choices_total", Help: "New instances placed on each shard by power-of-two-choices.",
		}, []string{"shard"}),
		coolingOff: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_cooling_off_total", Help: "Times a shard was set to cool off after a backpressure rejection.",
		}, []string{"shard"}),
		HandedBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_jobs_handed_back_total", Help: "Activated jobs the proxy could not deliver and gave back (FailJob, retries unchanged, no backoff).",
		}, []string{"shard", "reason"}),
		weights: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_pool_weight", Help: "Each pool's share of new instances in percent, while a cutover sets weights.",
		}, []string{"pool"}),
		ClientsCutOff: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_clients_cut_off_total", Help: "Client connections the proxy ended or refused, by reason: resets (more calls reset before their answer than --client-reset-budget), handshake (none within --client-handshake-timeout), connections (over --max-client-connections), cooldown (from an address cut off within --client-cooldown); and calls refused (REFUSED_STREAM): handlers (on a connection with 1000 handlers running), output (on a connection with more than --client-output-limit of answers waiting for its client to read).",
		}, []string{"reason"}),
		ClientConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardctl_proxy_client_connections", Help: "Client connections the proxy serves.",
		}),
		AcceptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardctl_proxy_accept_errors_total", Help: "Client connections the proxy failed to accept (out of file descriptors, most often); each is followed by a back-off, and accepting goes on.",
		}),
		LongCallsEnded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardctl_proxy_long_calls_ended_total", Help: "Long polls and job streams a stopping proxy ended, --drain-batch a second.",
		}),
		StreamsStalled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardctl_proxy_job_streams_stalled_total", Help: "Job streams ended because their worker read nothing for --stream-stall-timeout; their jobs were handed back.",
		}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_backlog_records", Help: "Records a shard committed and did not process yet, as the proxy last read them from its metrics.",
		}, []string{"shard"}),
		admitting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_admitting", Help: "0 while a shard gets no new instances for its backlog (over the max backlog or growing linearly), 1 otherwise.",
		}, []string{"shard"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_instances_in_flight", Help: "Root instances a shard has in flight (activated, not completed or terminated), as the proxy last read them from its metrics.",
		}, []string{"shard"}),
		instanceLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_instance_limit", Help: "Root instances in flight past which a congested shard gets no new instance (--instance-limit; 0: no limit).",
		}, []string{"shard"}),
		queueDelay: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_queue_delay_seconds", Help: "How long a shard's records wait to be processed, as the proxy last read it from its metrics (-1: a queue it does not process at all); over --queue-target the shard is paced.",
		}, []string{"shard"}),
		admitRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_admit_rate", Help: "New instances a second the proxy gives a shard at most (0: no bound): while it is paced, what keeps its queue at the target; else a ceiling over its known capacity.",
		}, []string{"shard"}),
		overloaded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_overloaded", Help: "1 while a shard has more requests in flight than the overload limit plus its excess, until it is back below the limit.",
		}, []string{"shard"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_inflight_limited_total", Help: "Calls refused with RESOURCE_EXHAUSTED because a shard had --max-inflight-per-shard requests in flight.",
		}, []string{"shard"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_up", Help: "1 while a shard passes its health checks, 0 while the proxy holds it DOWN.",
		}, []string{"shard"}),
		authRefused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "shardctl_proxy_shard_auth_refused", Help: "1 while a shard refuses the credential of the proxy's own calls (UNAUTHENTICATED, PERMISSION_DENIED, or no token to send); the shard answers, so it is not DOWN for it.",
		}, []string{"shard"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_health_checks_total", Help: "Active health checks (Topology calls) by shard and result.",
		}, []string{"shard", "result"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_outlier_ejections_total", Help: "Times a shard was ejected from placement for failures on real traffic.",
		}, []string{"shard"}),
		ejectionsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardctl_proxy_outlier_ejections_refused_total", Help: "Ejections not made because the max ejection percent of the shards was ejected already.",
		}, []string{"shard"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "shardctl_proxy_request_duration_seconds", Help: "Client request latency through the proxy.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"rpc"}),
	}
	m.ledger = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardctl_proxy_ledger_deployments", Help: "Deployments in the deployment ledger.",
	}, ledgerSize)
	longOpen := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardctl_proxy_long_calls_open", Help: "Long polls and job streams open now: the workers a stopping proxy has to hand to another replica.",
	}, longCalls)
	reachable := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "shardctl_proxy_registry_reachable", Help: "1 while the proxy hears the registry's watch (or follows none), 0 while it cannot reach it and routes on the last shard set the registry sent.",
	}, registryReachable)
	m.registry.MustRegister(m.inflight, m.requests, m.upstream, m.choices, m.coolingOff, m.HandedBack, m.weights, m.ledger, m.duration,
		m.up, m.authRefused, m.checks, m.ejections, m.ejectionsRefused, m.overloaded, m.limited, m.backlog, m.admitting, m.instances, m.instanceLimit, m.queueDelay, m.admitRate, m.LongCallsEnded, m.StreamsStalled, longOpen,
		m.ClientsCutOff, m.ClientConns, m.AcceptErrors, reachable,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the metrics are registered, for the admin listener's
// /metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }
