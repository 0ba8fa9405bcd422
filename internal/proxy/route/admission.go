package route

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/backlog"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/signals"
)

// Admission from the shard's own backlog. Zeebe's backpressure counts
// requests in flight, which stays low while the work behind them piles
// up: a shard past its knee accepts every new instance and completes
// fewer and fewer. The proxy reads each shard's records not processed
// (committed − processed positions, from its /metrics) every
// BacklogInterval and places nothing new on a shard whose backlog is over
// MaxBacklog or growing linearly (the signals' test), until it is back
// under half of MaxBacklog and not growing. The same reading gives the
// shard's root instances in flight and completions, for the instance
// limit (instances.go).

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

	mu      sync.Mutex
	history signals.Series // records not processed, oldest first
	status  proxyapi.BacklogStatus
	// limiting: at the last reading, the instance limit had refused a
	// placement since the reading before (what the log said last).
	limiting bool
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

// admit decides on one reading whether s takes new instances.
func (p *Core) admit(s *Shard, b backlog.Backlog) {
	a := &s.admission
	max := float64(p.cfg.MaxBacklog)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status.Max, a.status.At = max, b.At
	if b.InstancesKnown() {
		st := a.instances.observe(instanceReading{at: b.At, inFlight: b.InFlight, ended: b.Ended, lag: b.Lag}, int(s.partitions), p.cfg.BacklogInterval, p.cfg.InstanceLimit)
		a.status.Instances, a.status.InstanceLimit, a.status.Congested = b.InFlight, st.limit, st.binding
		a.status.CompletionRate, a.status.InFlightTime = st.rate, st.inFlightTime.Seconds()
		p.metrics.instances.WithLabelValues(s.ID).Set(b.InFlight)
		p.metrics.instanceLimit.WithLabelValues(s.ID).Set(float64(a.status.InstanceLimit))
		if st.refused != a.limiting {
			a.limiting = st.refused
			if st.refused {
				p.logShard(slog.LevelWarn, s, "shard refusing new instances", "reason", "instance limit",
					"instances", b.InFlight, "instanceLimit", st.limit, "completionRate", st.rate)
			} else {
				p.logShard(slog.LevelInfo, s, "shard admitting new instances", "reason", "instance limit",
					"instances", b.InFlight, "instanceLimit", st.limit)
			}
		}
	} else {
		// Unread, the limit would hold a stale count: missing data does
		// not refuse work.
		a.instances.limit.Store(0)
	}
	if max <= 0 {
		a.status.Admitting = true
		return
	}
	if !b.LagKnown() {
		a.status.Error = b.Error
		if a.status.Error == "" {
			a.status.Error = fmt.Sprintf("not in its metrics: %v", b.Missing)
		}
		return
	}
	a.status.Error = ""
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
	a.status.Records, a.status.Growing, a.status.Slope, a.status.Admitting = b.Lag, growing, slope, !refusing
	if refusing != a.refusing.Load() {
		a.refusing.Store(refusing)
		p.metrics.admitting.WithLabelValues(s.ID).Set(map[bool]float64{true: 0, false: 1}[refusing])
		if refusing {
			p.logShard(slog.LevelWarn, s, "shard refusing new instances", "reason", "backlog",
				"records", b.Lag, "maxBacklog", max, "growing", growing, "slope", slope)
		} else {
			p.logShard(slog.LevelInfo, s, "shard admitting new instances", "reason", "backlog",
				"records", b.Lag, "maxBacklog", max)
		}
	}
	p.metrics.backlog.WithLabelValues(s.ID).Set(b.Lag)
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
