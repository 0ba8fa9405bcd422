package registry

import (
	"errors"
	"fmt"
	"sync"

	"github.com/shardctl/shardctl/internal/registry/store"
)

// committer writes batches through the store in the order they were
// queued, every batch waiting at that moment in one transaction (group
// commit): a hundred registrations cost one fsync, and no lock of the
// registry is held while it runs. A write changes memory and queues its
// batch under the registry's lock, so the store sees the writes in the
// order memory did; it is answered once its transaction is durable.
//
// A failed transaction leaves memory ahead of the store, so the
// committer fails for good: every write after it is refused, and the
// registry reports not ready, until it is restarted from what the store
// holds.
type committer struct {
	store  store.Store
	sync   bool        // the store keeps nothing: a batch is done when queued
	onFail func(error) // told once, when the store fails

	mu     sync.Mutex
	queue  []*ticket
	failed error
	closed bool

	wake chan struct{}
	done chan struct{}
}

// ticket is one queued batch; done closes when it is durable or failed.
type ticket struct {
	b    store.Batch
	err  error
	done chan struct{}
}

var closedTicket = func() *ticket { t := &ticket{done: make(chan struct{})}; close(t.done); return t }()

// errStoreFailed prefixes every write refused after a failed commit.
var errStoreFailed = errors.New("store failed earlier; restart the registry to reload what the store holds")

func newCommitter(s store.Store, onFail func(error)) *committer {
	// A memory store keeps nothing; replicas over etcd write through
	// their own transactions (replica.go), never through a committer.
	_, memory := s.(*store.Memory)
	_, replicated := s.(*store.Etcd)
	c := &committer{store: s, sync: memory || replicated, onFail: onFail, wake: make(chan struct{}, 1), done: make(chan struct{})}
	if c.sync {
		close(c.done)
	} else {
		go c.run()
	}
	return c
}

// err is why writes are refused, or nil.
func (c *committer) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed != nil {
		return fmt.Errorf("store: %w: %w", errStoreFailed, c.failed)
	}
	if c.closed {
		return fmt.Errorf("store: the registry is closing")
	}
	return nil
}

// enqueue queues a batch. The caller may hold the registry's lock: this
// only appends.
func (c *committer) enqueue(b store.Batch) *ticket {
	if c.sync {
		return closedTicket
	}
	t := &ticket{b: b, done: make(chan struct{})}
	c.mu.Lock()
	switch {
	case c.failed != nil:
		t.err = fmt.Errorf("store: %w: %w", errStoreFailed, c.failed)
		close(t.done)
	case c.closed:
		t.err = fmt.Errorf("store: the registry is closing")
		close(t.done)
	default:
		c.queue = append(c.queue, t)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return t
}

func (t *ticket) wait() error {
	<-t.done
	return t.err
}

func (c *committer) run() {
	defer close(c.done)
	for range c.wake {
		c.mu.Lock()
		q, closed := c.queue, c.closed
		c.queue = nil
		c.mu.Unlock()
		if len(q) > 0 {
			c.commit(q)
		}
		if closed {
			return
		}
	}
}

func (c *committer) commit(q []*ticket) {
	bs := make([]store.Batch, len(q))
	for i, t := range q {
		bs[i] = t.b
	}
	err := c.store.Apply(bs...)
	if err != nil {
		c.mu.Lock()
		first := c.failed == nil
		if first {
			c.failed = err
		}
		c.mu.Unlock()
		if first && c.onFail != nil {
			c.onFail(err)
		}
		err = fmt.Errorf("store: %w", err)
	}
	for _, t := range q {
		t.err = err
		close(t.done)
	}
}

// close commits what is queued, refuses what comes after, and waits for
// the writer; safe twice.
func (c *committer) close() {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	if !already && !c.sync {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	<-c.done
}
