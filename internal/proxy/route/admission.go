package route

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/signals"
)

// Admission from the shard's own log. Zeebe's backpressure counts
// requests in flight, which stays low while the work behind them piles
// up: a shard past its knee accepts every new instance and completes
// fewer and fewer. The proxy reads each shard's /metrics every
// BacklogInterval and
//   - paces its new instances by the time its records wait to be
//     processed (pacing.go), or with --instance-limit N keeps a
//     congested shard under N root instances in flight (instances.go);
//   - places nothing new on it while its records not processed
//     (committed − processed positions) are over MaxBacklog or growing
//     linearly (the signals' test), until back under half of MaxBacklog
//     and not growing: the last stop, for a queue pacing could not hold.

// Admission defaults.
const (
	DefaultMaxBacklog      = 1000
	DefaultBacklogInterval = time.Second
	// backlogHistory is how far back the growth test looks.
	backlogHistory = time.Minute
)

// admission is one shard's backlog as the proxy last read it.
type admission struct {
	refusing  atomic.Bool   // no new instances for the backlog
	instances instanceLimit // no new instances past the limit in flight
	pacer     pacer         // new instances at most at a rate

	mu      sync.Mutex
	history signals.Series // records not processed, oldest first
	status  proxyapi.BacklogStatus
	// limiting: at the last reading, the instance limit had refused a
	// placement since the reading before (what the log said last).
	limiting bool
	// logLines are a reading's state changes, logged once mu is let go.
	logLines []func()
}

// admits reports whether the shard's admission takes a new instance at
// now.
func (a *admission) admits(now time.Time) bool {
	return !a.refusing.Load() && a.instances.admits() && a.pacer.admits(now)
}

// admissionLoop reads every shard's backlog each interval until the
// proxy stops.
func (p *Core) admissionLoop() {
	reader := backlog.Scrape{HTTP: &http.Client{Timeout: p.cfg.BacklogInterval}}
	p.everyShard(p.cfg.BacklogInterval, func(s *Shard) {
		if s.Metrics == "" {
			return
		}
		ctx, cancel := context.WithTimeout(p.stopping, p.cfg.BacklogInterval)
		defer cancel()
		p.admit(s, reader.Read(ctx, backlog.Target{Shard: s.ID, MetricsURL: s.Metrics}))
	})
}

// admit decides on one reading whether s takes new instances, and how
// many.
func (p *Core) admit(s *Shard, b backlog.Backlog) {
	a := &s.admission
	max := float64(p.cfg.MaxBacklog)
	a.mu.Lock()
	defer func() {
		// Logged once the lock is let go: GET /shards reads the status
		// under it, and a log sink may block.
		lines := a.logLines
		a.logLines = nil
		a.mu.Unlock()
		for _, line := range lines {
			line()
		}
	}()
	a.status.Max, a.status.At, a.status.QueueTarget = max, b.At, p.cfg.QueueTarget.Seconds()
	if !b.LagKnown() {
		// Nothing read: every decision stands, as it would had the
		// reading come late. The status says why.
		a.status.Error = b.Error
		if a.status.Error == "" {
			a.status.Error = fmt.Sprintf("not in its metrics: %v", b.Missing)
		}
		return
	}
	a.status.Error = ""
	p.pace(s, b)
	p.limitInstances(s, b)
	if max > 0 {
		p.refuseBacklog(s, b, max)
	} else {
		a.refusing.Store(false)
		a.status.Admitting = true
	}
	a.status.Records = b.Lag
	p.metrics.backlog.WithLabelValues(s.ID).Set(b.Lag)
	switch {
	case !a.status.Admitting:
		a.status.State, a.status.Reason = proxyapi.AdmissionRefused, backlogReason(a.status)
	case a.status.Congested && a.status.InstanceLimit > 0 && a.status.Instances >= float64(a.status.InstanceLimit):
		a.status.State = proxyapi.AdmissionRefused
		a.status.Reason = fmt.Sprintf("%.0f instances in flight, at its instance limit of %d while congested", a.status.Instances, a.status.InstanceLimit)
	}
}

// pace sets s's pace from a reading (a.mu held).
func (p *Core) pace(s *Shard, b backlog.Backlog) {
	a := &s.admission
	st := a.pacer.observe(pacingReading{at: b.At, lag: b.Lag, committed: b.Committed, processed: b.Processed,
		created: b.Created, latencySum: b.LatencySum, latCount: b.LatencyCount, ended: b.Ended, jobsOpen: b.WorkerJobs(), jobsEnded: b.JobsEnded}, p.cfg.QueueTarget, int(s.partitions.Load()), p.cfg.InstanceLimit != InstanceLimitAuto)
	a.status.State, a.status.Reason = st.state, st.reason
	a.status.QueueDelay, a.status.Capacity, a.status.RecordsPerInstance, a.status.AdmitRate = finite(st.queueDelay), st.capacity, st.perInstance, st.rate
	p.metrics.queueDelay.WithLabelValues(s.ID).Set(finite(st.queueDelay))
	p.metrics.admitRate.WithLabelValues(s.ID).Set(st.rate)
	if !st.changed {
		return
	}
	if st.state == proxyapi.AdmissionPaced {
		a.logLines = append(a.logLines, func() {
			p.logShard(slog.LevelWarn, s, "shard paced", "reason", "queue", "queueDelaySeconds", finite(st.queueDelay),
				"queueTarget", logDuration(p.cfg.QueueTarget), "admitRate", st.rate, "capacity", st.capacity, "recordsPerInstance", st.perInstance)
		})
	} else {
		a.logLines = append(a.logLines, func() {
			p.logShard(slog.LevelInfo, s, "shard no longer paced", "reason", "queue", "queueDelaySeconds", finite(st.queueDelay),
				"queueTarget", logDuration(p.cfg.QueueTarget))
		})
	}
}

// limitInstances applies a fixed instance limit from a reading (a.mu
// held).
func (p *Core) limitInstances(s *Shard, b backlog.Backlog) {
	a := &s.admission
	if !b.InstancesKnown() {
		a.instances.limit.Store(0)
		return
	}
	limit := max(p.cfg.InstanceLimit, 0)
	binding, refused := a.instances.observe(b.InFlight, b.Lag, limit)
	a.status.Instances, a.status.InstanceLimit, a.status.Congested = b.InFlight, limit, binding
	p.metrics.instances.WithLabelValues(s.ID).Set(b.InFlight)
	p.metrics.instanceLimit.WithLabelValues(s.ID).Set(float64(limit))
	if refused == a.limiting {
		return
	}
	a.limiting = refused
	if refused {
		a.logLines = append(a.logLines, func() {
			p.logShard(slog.LevelWarn, s, "shard refusing new instances", "reason", "instance limit",
				"instances", b.InFlight, "instanceLimit", limit)
		})
	} else {
		a.logLines = append(a.logLines, func() {
			p.logShard(slog.LevelInfo, s, "shard admitting new instances", "reason", "instance limit",
				"instances", b.InFlight, "instanceLimit", limit)
		})
	}
}

// refuseBacklog stops new instances on a backlog over max or growing,
// until it is back under half of max and not growing (a.mu held).
func (p *Core) refuseBacklog(s *Shard, b backlog.Backlog, max float64) {
	a := &s.admission
	a.history = append(a.history.Since(b.At.Add(-backlogHistory)), signals.Point{T: b.At, V: b.Lag})
	// Growth that matters: half the limit over the fit.
	th := signals.Thresholds{Recent: 10 * time.Second, QueueR2: 0.8, QueueMinGrowth: max / 2}
	slope, _, growing := signals.QueueTrend(a.history, b.At, th)
	refusing := a.refusing.Load()
	switch {
	case b.Lag > max || growing:
		refusing = true
	case b.Lag <= max/2:
		refusing = false
	}
	a.status.Growing, a.status.Slope, a.status.Admitting = growing, slope, !refusing
	if refusing == a.refusing.Load() {
		return
	}
	a.refusing.Store(refusing)
	p.metrics.admitting.WithLabelValues(s.ID).Set(map[bool]float64{true: 0, false: 1}[refusing])
	if refusing {
		a.logLines = append(a.logLines, func() {
			p.logShard(slog.LevelWarn, s, "shard refusing new instances", "reason", "backlog",
				"records", b.Lag, "maxBacklog", max, "growing", growing, "slope", slope)
		})
	} else {
		a.logLines = append(a.logLines, func() {
			p.logShard(slog.LevelInfo, s, "shard admitting new instances", "reason", "backlog",
				"records", b.Lag, "maxBacklog", max)
		})
	}
}

// backlogReason says why a shard gets no new instances for its backlog,
// with the reading.
func backlogReason(b proxyapi.BacklogStatus) string {
	why := fmt.Sprintf("backlog %s records (max %s)", human.Count(b.Records), human.Count(b.Max))
	if b.Growing {
		why += fmt.Sprintf(", growing %+.0f/s", b.Slope)
	}
	return why
}

// finite is v, or -1 for a queue that is not processed at all, which
// JSON and Prometheus gauges read as a number.
func finite(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return -1
	}
	return v
}

// CoolOff keeps new instances off s for CoolingOff after it answered
// err, RESOURCE_EXHAUSTED: each answer does, many a second under load.
func (p *Core) CoolOff(s *Shard, err error) {
	until := s.CoolOff(p.cfg.CoolingOff)
	p.metrics.coolingOff.WithLabelValues(s.ID).Inc()
	p.logShardRepeating(slog.LevelWarn, s, "shard cooling off, refusing new instances", "for", logDuration(p.cfg.CoolingOff),
		"until", until.UTC(), "reason", status.Convert(err).Message())
}

func (s *Shard) backlogStatus() *proxyapi.BacklogStatus {
	if s.Metrics == "" {
		return nil
	}
	s.admission.mu.Lock()
	defer s.admission.mu.Unlock()
	st := s.admission.status
	if st.At.IsZero() {
		st.Admitting = true
	}
	return &st
}
