package route

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// gatedLedger is a ledger whose first read after arm waits at a gate
// until release is closed.
type gatedLedger struct {
	ledger.MemoryLedger
	armed   atomic.Bool
	reached chan struct{} // the armed read came to the gate (buffered: 1)
	release chan struct{}
}

func (l *gatedLedger) All(ctx context.Context) ([]ledger.Deployment, error) {
	if l.armed.CompareAndSwap(true, false) {
		l.reached <- struct{}{}
		<-l.release
	}
	return l.MemoryLedger.All(ctx)
}

// A shard marked DOWN while the health check that would bring it back
// replays the ledger to it stays DOWN: the replay's success is older
// than the failure, and the shard is replayed again before it is back.
func TestMarkDownDuringAReplayWins(t *testing.T) {
	shards := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	l := &gatedLedger{reached: make(chan struct{}, 1), release: make(chan struct{})}
	ctx := budget.Context(t, time.Minute)
	if _, err := l.Append(ctx, ledger.Deployment{Resources: []ledger.Resource{{Name: "p.bpmn", Content: load.Process("p", "t")}}}); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Shards: simtest.ShardConfigs(shards), Ledger: l, Health: HealthConfig{Interval: -1, HealthyAfter: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	// Checks run, but no loop: the test runs them; each may take its time
	// (with the interval -1 at New the timeout defaulted to 1 ms, which a
	// Topology call under -race on a busy machine can miss).
	p.cfg.Health.Interval, p.cfg.Health.Timeout = time.Hour, budget.Of(10*time.Second)
	s := p.Snapshot()[0]
	replayEnds(t, s) // the first, at Open
	p.markDown(s, "a first failure")

	l.armed.Store(true)
	p.check(s) // passes: the replay starts, outside the check
	select {
	case <-l.reached: // the replay reads the ledger
	case <-time.After(budget.Of(10 * time.Second)):
		t.Fatal("the health check did not start a replay")
	}
	p.markDown(s, "a failure during the replay")
	close(l.release)
	replayEnds(t, s)
	if !s.health.down.Load() || !s.health.needsReplay.Load() {
		t.Fatalf("down %v, needs a replay %v after a failure during its replay: want DOWN, to be replayed again", s.health.down.Load(), s.health.needsReplay.Load())
	}
	p.check(s) // no failure meanwhile: back
	replayEnds(t, s)
	if s.health.down.Load() || s.health.needsReplay.Load() {
		t.Errorf("down %v, needs a replay %v after a clean check and replay: want it back", s.health.down.Load(), s.health.needsReplay.Load())
	}
}

// replayEnds waits for the replay to s to end.
func replayEnds(t *testing.T, s *Shard) {
	t.Helper()
	budget.Eventually(t, 10*time.Second, "the replay to end", func() bool { return !s.replaying.Load() })
}
