package route

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

// A shard is overloaded past limit × (1 + excess) in flight and stays so
// until it is back below the limit, not at one number: no flapping.
func TestOverloadHysteresis(t *testing.T) {
	p, err := New(Config{Dynamic: true, OverloadLimit: 4, OverloadExcess: 50, Health: HealthConfig{Interval: -1}})
	if err != nil {
		t.Fatal(err)
	}
	s := fakeShard("a", 1, "")
	release := make(chan struct{})
	var wg sync.WaitGroup
	// entered and ended count calls past enter (in their body) and past
	// leave (returned): enter counts a call in flight before it marks the
	// shard overloaded, and leave before it clears the mark, so the count
	// alone does not say the mark is set yet.
	var entered, ended atomic.Int64
	start := func(n int) {
		want, wantEntered := s.inflight.Load()+int64(n), entered.Load()+int64(n)
		for range n {
			wg.Go(func() {
				if p.Enter(s, "CreateProcessInstance") == nil {
					entered.Add(1)
					<-release
					p.Leave(s, "CreateProcessInstance", nil, false)
				}
				ended.Add(1)
			})
		}
		budget.Eventually(t, 5*time.Second, "calls in flight", func() bool { return entered.Load() == wantEntered && s.inflight.Load() == want })
	}
	finish := func(n int) {
		want, wantEnded := s.inflight.Load()-int64(n), ended.Load()+int64(n)
		for range n {
			release <- struct{}{}
		}
		budget.Eventually(t, 5*time.Second, "calls ended", func() bool { return ended.Load() == wantEnded && s.inflight.Load() == want })
	}
	for _, step := range []struct {
		do         func()
		overloaded bool
	}{
		{func() { start(6) }, false},  // 6 = 4 + 50%: not past it
		{func() { start(1) }, true},   // 7
		{func() { finish(2) }, true},  // 5: still over the limit
		{func() { finish(1) }, true},  // 4: at the limit, not below
		{func() { finish(1) }, false}, // 3
		{func() { start(2) }, false},  // 5: under the excess again
	} {
		step.do()
		if got := s.overloaded.Load(); got != step.overloaded {
			t.Fatalf("%d in flight: overloaded %v, want %v", s.inflight.Load(), got, step.overloaded)
		}
	}
	close(release)
	wg.Wait()
}
