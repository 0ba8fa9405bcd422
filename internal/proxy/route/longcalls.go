package route

import (
	"context"
	"slices"
	"sync"
	"time"
)

// longCalls are the long polls and job streams open now. A stopping proxy
// ends them a batch at a time (DrainBatch a second), so that the workers
// reconnect to the other replicas over a few seconds instead of all in
// the same instant.
type LongCalls struct {
	mu   sync.Mutex
	next uint64
	open map[uint64]func() // how each call ends
}

// add registers a long call; its context ends when the drain reaches it
// (or parent ends). done unregisters it.
func (l *LongCalls) Add(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	remove := l.AddFunc(cancel)
	return ctx, func() {
		remove()
		cancel()
	}
}

// addFunc registers a long call that ends by calling end when the drain
// reaches it; remove unregisters it.
func (l *LongCalls) AddFunc(end func()) (remove func()) {
	l.mu.Lock()
	if l.open == nil {
		l.open = map[uint64]func(){}
	}
	id := l.next
	l.next++
	l.open[id] = end
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.open, id)
		l.mu.Unlock()
	}
}

// end ends up to n of the oldest long calls (n ≤ 0: all) and reports how
// many it ended.
func (l *LongCalls) end(n int) int {
	l.mu.Lock()
	ids := slices.Sorted(func(yield func(uint64) bool) {
		for id := range l.open {
			if !yield(id) {
				return
			}
		}
	})
	if n > 0 && n < len(ids) {
		ids = ids[:n]
	}
	cancels := make([]func(), 0, len(ids))
	for _, id := range ids {
		cancels = append(cancels, l.open[id])
		delete(l.open, id)
	}
	l.mu.Unlock()
	for _, c := range cancels {
		c()
	}
	return len(cancels)
}

func (l *LongCalls) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.open)
}

// drainLongCalls ends the open long calls, DrainBatch a second (all at
// once without a batch), until none is left or ctx ends.
func (p *Core) drainLongCalls(ctx context.Context) {
	for p.long.count() > 0 {
		ended := p.long.end(p.cfg.DrainBatch)
		p.metrics.LongCallsEnded.Add(float64(ended))
		left := p.long.count()
		if p.cfg.OnDrain != nil {
			p.cfg.OnDrain(ended, left)
		}
		if left == 0 {
			return
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return
		}
	}
}
