package h2

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Writes are flushed by the goroutines that make them, not handed to a
// writer goroutine: at a few thousand small calls a second, waking a
// goroutine per write costs more than the write. But one read often
// brings several frames (a call's head, data and trailers; many calls
// under load), and writing what each of them causes at once would make
// a system call per frame. So while any reader handles what its last
// read brought (a batch), flushes wait in a list that the reader
// flushes when it is done, before it reads again; with no batch under
// way, a flush writes at once. A reader never blocks inside a batch
// (it ends the batch before it reads, and handlers must not block), so
// a flush waits for microseconds at most.
var (
	batches     atomic.Int32 // readers inside a batch
	deferredMu  sync.Mutex
	deferred    []*Conn
	deferredOut []*Conn // the list being flushed, kept for reuse
)

// flush sends what is queued on c: at the end of the batches under way,
// or now.
func (c *Conn) flush() {
	if batches.Load() == 0 {
		c.flushNow()
		return
	}
	if c.deferred.CompareAndSwap(false, true) {
		deferredMu.Lock()
		deferred = append(deferred, c)
		deferredMu.Unlock()
	}
	// The last batch may have ended, and flushed the list, just before
	// c joined it: then nobody else will.
	if batches.Load() == 0 {
		flushDeferred()
	}
}

// flushShared is flush for a write many goroutines make at once outside
// any reader's batch (calls the proxy makes itself, such as the REST
// front's, one goroutine per client connection): with no batch under
// way, the first of them lets the goroutines that are ready run, so that
// those about to write queue their frames and its one write carries them
// all (on loopback a write costs as much as the rest of a call). The
// others queue and go on without yielding: the first flushes what they
// queued before it ends its yield, and whoever queues after that yields
// and flushes in turn. When nobody else is ready, the yield returns at
// once.
func (c *Conn) flushShared() {
	if batches.Load() != 0 {
		c.flush()
		return
	}
	if !c.yielding.CompareAndSwap(false, true) {
		return // the yielding goroutine flushes after it has seen this one's frames queued
	}
	runtime.Gosched()
	c.yielding.Store(false)
	c.flush()
}

func flushDeferred() {
	deferredMu.Lock()
	list := deferred
	deferred = deferredOut[:0]
	deferredOut = nil
	deferredMu.Unlock()
	for i, c := range list {
		c.deferred.Store(false)
		c.flushNow()
		list[i] = nil
	}
	deferredMu.Lock()
	if deferredOut == nil {
		deferredOut = list[:0]
	}
	deferredMu.Unlock()
}

// batch is one reader's: begun when a read brought frames, ended before
// the next read that would wait.
type batch struct{ on bool }

// begin reports whether it began one (false: one is under way).
func (b *batch) begin() bool {
	if b.on {
		return false
	}
	b.on = true
	batches.Add(1)
	return true
}

func (b *batch) end() {
	if b.on {
		b.on = false
		batches.Add(-1)
		flushDeferred()
	}
}
