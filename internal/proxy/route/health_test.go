package route

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
)

// Failures on real traffic eject a shard from placement, for longer each
// time; never more than the max ejection percent of the shards at once;
// a success resets the count; a refused connection marks it DOWN at once.
func TestOutlierEjection(t *testing.T) {
	p, err := New(Config{Dynamic: true, Health: HealthConfig{Interval: -1, OutlierFailures: 3, EjectionTime: time.Minute, MaxEjectionPercent: 50}})
	if err != nil {
		t.Fatal(err)
	}
	p.cfg.Health.Interval = time.Hour // on, but no loop runs
	a, b, c, d := fakeShard("a", 1, ""), fakeShard("b", 2, ""), fakeShard("c", 3, ""), fakeShard("d", 4, "")
	p.set.Store(build([]*Shard{a, b, c, d}, "", nil))
	unavailable := status.Error(codes.Unavailable, "io exception")
	fail := func(s *Shard, n int, err error) {
		for range n {
			p.noteFailure(false, s, err)
		}
	}
	until := func(s *Shard) time.Duration {
		return time.Until(time.Unix(0, s.health.ejectedUntil.Load())).Round(time.Minute)
	}

	fail(a, 2, unavailable)
	a.health.consecutive.Store(0) // what a success does (call)
	fail(a, 2, unavailable)
	if a.health.ejected(time.Now()) {
		t.Fatal("ejected after failures a success interrupted")
	}
	fail(a, 1, unavailable)
	if !a.health.ejected(time.Now()) || until(a) != time.Minute {
		t.Fatalf("a: ejected %v for %v after 3 failures in a row, want 1m", a.health.ejected(time.Now()), until(a))
	}
	// The client's own deadline is not the shard's failure.
	for range 5 {
		p.noteFailure(true, b, status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	}
	if b.health.ejected(time.Now()) {
		t.Error("b ejected for its clients' deadlines")
	}
	fail(b, 3, status.Error(codes.DeadlineExceeded, "request timed out in the broker"))
	if !b.health.ejected(time.Now()) {
		t.Error("b not ejected after the shard's own timeouts")
	}
	fail(c, 3, unavailable)
	if c.health.ejected(time.Now()) || testutil.ToFloat64(p.metrics.ejectionsRefused.WithLabelValues("c")) != 1 {
		t.Error("a third of four shards ejected past the 50% limit")
	}
	// Ejected again: twice as long.
	a.health.ejectedUntil.Store(0)
	fail(a, 3, unavailable)
	if until(a) != 2*time.Minute {
		t.Errorf("second ejection of a for %v, want 2m", until(a))
	}
	if picked := p.Pick(time.Now(), nil, ""); picked != c && picked != d {
		t.Errorf("picked %v while a and b are ejected", picked.ID)
	}
	refused := status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\"")
	p.noteFailure(false, d, refused)
	if !d.health.down.Load() || d.RoutingState() != proxyapi.Down {
		t.Error("a refused connection did not mark d DOWN")
	}
	if err := DownError(d); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("downError: %v", err)
	}
	if picked := p.Pick(time.Now(), nil, ""); picked != c {
		t.Errorf("picked %v, want c, the one shard neither ejected nor DOWN", picked)
	}
	p.set.Store(emptySet) // fake shards have no connection to close
	if err := p.Close(context.Background()); err != nil {
		t.Error(err)
	}
}
