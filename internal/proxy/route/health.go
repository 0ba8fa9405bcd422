package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
)

// HealthConfig is how the proxy finds out that a shard is gone or failing,
// apart from what the registry says: active checks (a Topology call per
// shard) mark it DOWN and back, and failures on real traffic eject it from
// placement for a while (Envoy's outlier detection).
type HealthConfig struct {
	// Interval between checks (default 2 s; negative: no checks).
	Interval time.Duration
	// Timeout of one check (default 1 s, at most Interval).
	Timeout time.Duration
	// UnhealthyAfter failed checks in a row mark a shard DOWN (default 2);
	// HealthyAfter good ones bring it back, after the ledger is replayed
	// to it (default 2).
	UnhealthyAfter, HealthyAfter int
	// OutlierFailures transport failures or shard timeouts in a row on
	// real traffic eject a shard from placement (default 5; negative: no
	// ejection) for EjectionTime times the number of its ejections so far
	// (default 30 s, at most ten times that).
	OutlierFailures int
	EjectionTime    time.Duration
	// MaxEjectionPercent of the shards may be ejected at once (default 50).
	MaxEjectionPercent int
}

// Health defaults.
const (
	DefaultHealthInterval     = 2 * time.Second
	DefaultHealthTimeout      = time.Second
	DefaultUnhealthyAfter     = 2
	DefaultHealthyAfter       = 2
	DefaultOutlierFailures    = 5
	DefaultEjectionTime       = 30 * time.Second
	DefaultMaxEjectionPercent = 50
	maxEjectionMultiple       = 10
)

func (h *HealthConfig) validate() error {
	if h.Interval == 0 {
		h.Interval = DefaultHealthInterval
	}
	if h.Timeout == 0 {
		h.Timeout = min(DefaultHealthTimeout, max(h.Interval, time.Millisecond))
	}
	if h.UnhealthyAfter == 0 {
		h.UnhealthyAfter = DefaultUnhealthyAfter
	}
	if h.HealthyAfter == 0 {
		h.HealthyAfter = DefaultHealthyAfter
	}
	if h.OutlierFailures == 0 {
		h.OutlierFailures = DefaultOutlierFailures
	}
	if h.EjectionTime == 0 {
		h.EjectionTime = DefaultEjectionTime
	}
	if h.MaxEjectionPercent == 0 {
		h.MaxEjectionPercent = DefaultMaxEjectionPercent
	}
	switch {
	case h.Interval > 0 && (h.Timeout < 0 || h.Timeout > h.Interval):
		return fmt.Errorf("health timeout %v: want a positive duration no longer than the interval %v", h.Timeout, h.Interval)
	case h.UnhealthyAfter < 1 || h.HealthyAfter < 1:
		return errors.New("unhealthy-after and healthy-after: want at least 1")
	case h.EjectionTime < 0:
		return fmt.Errorf("ejection time %v: want a positive duration", h.EjectionTime)
	case h.MaxEjectionPercent < 1 || h.MaxEjectionPercent > 100:
		return fmt.Errorf("max ejection percent %d: want 1-100 (turn ejection off with outlier failures -1)", h.MaxEjectionPercent)
	}
	return nil
}

// health is a shard's health as the proxy sees it.
type health struct {
	down        atomic.Bool
	needsReplay atomic.Bool // missed a deployment, or was DOWN: replay before placing
	// consecutive transport failures on real traffic, reset by a success
	consecutive  atomic.Int32
	ejectedUntil atomic.Int64 // unix nanos
	ejections    atomic.Int32

	// ejectionLogged: an ejection was logged and its end not yet.
	ejectionLogged atomic.Bool

	mu        sync.Mutex // the fields below
	since     time.Time  // of the last change between up and DOWN
	reason    string     // why it is DOWN
	auth      string     // why it refuses the proxy's own calls ("": it does not)
	authSince time.Time
	lastEject time.Time
	// gen counts what makes a replay's success stale: markDown's calls
	// (a replay that began before one proves nothing of the shard after
	// it) and deployments it missed (mark).
	gen uint64

	// fails is owned by the health loop; oks too, but markDown resets it
	// from any call.
	fails int
	oks   atomic.Int32
}

func (h *health) ejected(now time.Time) bool { return now.UnixNano() < h.ejectedUntil.Load() }

// everyShard runs do on every shard that is still in the registry (not
// DOWN there) every interval until the proxy stops, each shard on its
// own: a shard whose last run has not ended (a check that waits out its
// timeout) skips this one, and delays no other shard's.
func (p *Core) everyShard(interval time.Duration, do func(*Shard)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	running := map[*Shard]chan struct{}{} // closed when the shard's run ends
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-p.stopping.Done():
			return
		case <-t.C:
		}
		snapshot := p.Snapshot()
		for s, done := range running {
			select {
			case <-done:
				delete(running, s)
			default:
				if !slices.Contains(snapshot, s) {
					delete(running, s) // it left; its run ends by itself
				}
			}
		}
		for _, s := range snapshot {
			if _, busy := running[s]; busy || s.State() == proxyapi.Down {
				continue
			}
			done := make(chan struct{})
			running[s] = done
			wg.Go(func() {
				defer close(done)
				do(s)
			})
		}
	}
}

// healthLoop checks every shard each interval until the proxy stops.
func (p *Core) healthLoop() { p.everyShard(p.cfg.Health.Interval, p.check) }

// check runs one health check of s and acts on it: DOWN after
// UnhealthyAfter failures, back after HealthyAfter successes once the
// ledger is replayed (a restarted shard may have lost its deployments;
// Zeebe ignores a deployment it has).
func (p *Core) check(s *Shard) {
	h := &s.health
	p.noteReturned(s, time.Now())
	ctx, cancel := context.WithTimeout(p.stopping, p.cfg.Health.Timeout)
	refused, err := s.topology(ctx)
	cancel()
	if p.stopping.Err() != nil {
		return
	}
	if err == nil {
		// It answered, whatever it made of the proxy's credential.
		p.noteAuth(s, refused)
		if perr := s.checkPartitions(); perr != nil {
			p.markDown(s, perr.Error())
			return
		}
	}
	if err != nil {
		p.metrics.checks.WithLabelValues(s.ID, "failure").Inc()
		h.oks.Store(0)
		h.fails++
		if h.fails >= p.cfg.Health.UnhealthyAfter {
			p.markDown(s, fmt.Sprintf("%d health checks failed: %s", h.fails, status.Convert(err).Message()))
		}
		return
	}
	p.metrics.checks.WithLabelValues(s.ID, "success").Inc()
	h.fails = 0
	oks := h.oks.Add(1)
	down := h.down.Load()
	if (down && int(oks) >= p.cfg.Health.HealthyAfter) || (!down && h.needsReplay.Load()) {
		p.startReplay(s, true) // back once it is done (replayed), outside this round; the next round tries again
	}
}

// noteAuth records what s made of the proxy's credential at its last
// answer (refused nil: it took it), and logs a change. A refusal asks
// the credential for a new token: it may have been revoked.
func (p *Core) noteAuth(s *Shard, refused error) {
	h := &s.health
	why := ""
	if refused != nil {
		why = refused.Error()
		s.Conn.Credential().Refused()
	}
	h.mu.Lock()
	was := h.auth
	if why != was {
		h.auth = why
		if was == "" || why == "" {
			h.authSince = time.Now()
		}
	}
	h.mu.Unlock()
	switch {
	case why == was:
	case why == "":
		p.metrics.authRefused.WithLabelValues(s.ID).Set(0)
		p.logShard(slog.LevelInfo, s, "shard accepts the proxy's credential", "credential", s.Conn.Credential().Name())
	case was == "":
		p.metrics.authRefused.WithLabelValues(s.ID).Set(1)
		p.logShard(slog.LevelWarn, s, "shard refuses the proxy's credential", "credential", s.Conn.Credential().Name(), "reason", why)
	}
}

// mark records that s misses a deployment: it needs a replay, and one
// under way when this came must run again.
func (h *health) mark() {
	h.mu.Lock()
	h.gen++
	h.needsReplay.Store(true)
	h.mu.Unlock()
}

// generation is what a replay starting now must still find when it ends
// for its success to count.
func (h *health) generation() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

// markDown takes s out of routing: no new instances, jobs or messages,
// and calls for its keys fail at once.
func (p *Core) markDown(s *Shard, reason string) {
	h := &s.health
	h.mu.Lock()
	h.gen++
	changed := !h.down.Load()
	if changed {
		h.since, h.reason = time.Now(), reason
		h.down.Store(true)
		h.needsReplay.Store(true)
		h.oks.Store(0) // back only after HealthyAfter good checks from now
	}
	h.mu.Unlock()
	if changed {
		p.metrics.up.WithLabelValues(s.ID).Set(0)
		s.NoteError(errors.New("DOWN: " + reason))
		// from and to are what the proxy routes by (RoutingState).
		p.logShard(slog.LevelWarn, s, "shard down", "from", s.State(), "to", proxyapi.Down, "reason", reason)
	}
}

// noteFailure reads a failed call for what it says of the shard: a
// refused connection proves it is gone (DOWN until the checks bring it
// back); unavailability or the shard's own timeout, repeated, ejects it.
// clientEnded: the client's deadline or cancellation ended the call,
// which is not the shard's fault.
func (p *Core) noteFailure(clientEnded bool, s *Shard, err error) {
	if p.cfg.Health.Interval < 0 {
		return
	}
	if NeverSent(err) {
		p.markDown(s, "connection refused: "+status.Convert(err).Message())
		return
	}
	code := status.Code(err)
	if code != codes.Unavailable && (code != codes.DeadlineExceeded || clientEnded) {
		return
	}
	if p.cfg.Health.OutlierFailures > 0 && int(s.health.consecutive.Add(1)) >= p.cfg.Health.OutlierFailures {
		p.eject(s, fmt.Sprintf("%d failures in a row: %s", p.cfg.Health.OutlierFailures, status.Convert(err).Message()))
	}
}

// eject keeps new instances off s for a while, growing with each
// ejection, unless that would eject more than MaxEjectionPercent of the
// shards.
func (p *Core) eject(s *Shard, reason string) {
	// Logged once the lock is let go: a log sink that blocks must not
	// hold every call that fails on a shard.
	var logLine func()
	defer func() {
		if logLine != nil {
			logLine()
		}
	}()
	p.ejectMu.Lock()
	defer p.ejectMu.Unlock()
	now := time.Now()
	h := &s.health
	h.consecutive.Store(0)
	if h.ejected(now) {
		return
	}
	shards := p.Snapshot()
	ejected := 1
	for _, o := range shards {
		if o.health.ejected(now) {
			ejected++
		}
	}
	if ejected*100 > len(shards)*p.cfg.Health.MaxEjectionPercent {
		p.metrics.ejectionsRefused.WithLabelValues(s.ID).Inc()
		logLine = func() {
			p.logShardRepeating(slog.LevelWarn, s, "shard not ejected: too many shards ejected already", "ejected", ejected-1, "shards", len(shards),
				"maxEjectionPercent", p.cfg.Health.MaxEjectionPercent, "reason", reason)
		}
		return
	}
	h.mu.Lock()
	// A shard that stayed well for a while starts again from one.
	if !h.lastEject.IsZero() && now.Sub(h.lastEject) > time.Duration(maxEjectionMultiple)*p.cfg.Health.EjectionTime {
		h.ejections.Store(0)
	}
	h.lastEject = now
	h.mu.Unlock()
	n := min(h.ejections.Add(1), maxEjectionMultiple)
	d := time.Duration(n) * p.cfg.Health.EjectionTime
	h.ejectedUntil.Store(now.Add(d).UnixNano())
	p.metrics.ejections.WithLabelValues(s.ID).Inc()
	s.NoteError(fmt.Errorf("ejected for %v: %s", d, reason))
	h.ejectionLogged.Store(true)
	ejections := h.ejections.Load()
	logLine = func() {
		p.logShard(slog.LevelWarn, s, "shard ejected from placement", "for", logDuration(d), "until", now.Add(d).UTC(),
			"ejections", ejections, "reason", reason)
	}
}

// noteReturned logs the end of an ejection, which ends with time: the
// health loop looks for it each round.
func (p *Core) noteReturned(s *Shard, now time.Time) {
	h := &s.health
	if h.ejectionLogged.Load() && !h.ejected(now) && h.ejectionLogged.CompareAndSwap(true, false) {
		p.logShard(slog.LevelInfo, s, "shard returned to placement", "ejectedUntil", time.Unix(0, h.ejectedUntil.Load()).UTC())
	}
}

// DownError is what a call for the keys of a DOWN shard gets, at once.
func DownError(s *Shard) error {
	h := &s.health
	h.mu.Lock()
	since, reason := h.since, h.reason
	h.mu.Unlock()
	return status.Errorf(codes.Unavailable, "shard %s is DOWN since %s (%s): calls for its keys fail until it is back",
		s.ID, since.UTC().Format(time.RFC3339), reason)
}

func (s *Shard) healthStatus(now time.Time) proxyapi.ShardHealth {
	h := &s.health
	out := proxyapi.ShardHealth{Up: !h.down.Load(), Ejections: int(h.ejections.Load())}
	h.mu.Lock()
	if !h.since.IsZero() {
		since := h.since.UTC()
		out.Since = &since
	}
	out.Reason = h.reason
	if h.auth != "" {
		since := h.authSince.UTC()
		out.Auth, out.AuthSince = h.auth, &since
	}
	h.mu.Unlock()
	if h.ejected(now) {
		until := time.Unix(0, h.ejectedUntil.Load()).UTC()
		out.EjectedUntil = &until
	}
	return out
}
