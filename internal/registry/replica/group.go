package replica

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// groupCommit gathers the writes waiting for etcd and sends them as one
// transaction, each write a transaction nested under its own guards: a
// write that lost its race to another replica fails alone, and fifty
// registrations cost one round trip, one raft entry and one watch event
// batch instead of fifty. etcd refuses a transaction that puts or
// deletes one key twice, and reads every guard before it writes, so two
// writes that touch a key never go together: the later one waits for
// the earlier one's answer before it is even planned (claim), and plans
// on its change.
type groupCommit struct {
	mu       sync.Mutex
	queue    []*pendingWrite
	closed   bool
	maxOps   int // etcd's --max-txn-ops as learnt: lowered when refused
	maxBytes int
	wake     chan struct{} // cap 1

	// writing is the state keys of this replica's writes under way, each
	// with a channel closed when that write is answered.
	writingMu sync.Mutex
	writing   map[string]chan struct{}
}

// claim marks keys as being written and returns nil; or, when a write
// under way has one of them, returns what closes when it is answered.
func (g *groupCommit) claim(keys []string) <-chan struct{} {
	g.writingMu.Lock()
	defer g.writingMu.Unlock()
	for _, k := range keys {
		if ch, ok := g.writing[k]; ok {
			return ch
		}
	}
	ch := make(chan struct{})
	for _, k := range keys {
		g.writing[k] = ch
	}
	return nil
}

// release unmarks what claim marked, and wakes the writes that waited.
func (g *groupCommit) release(keys []string) {
	g.writingMu.Lock()
	defer g.writingMu.Unlock()
	if len(keys) == 0 {
		return
	}
	close(g.writing[keys[0]])
	for _, k := range keys {
		delete(g.writing, k)
	}
}

// pendingWrite is one Write's transaction, waiting in the queue.
type pendingWrite struct {
	guards []clientv3.Cmp
	ops    []clientv3.Op
	bytes  int
	done   chan struct{}
	held   bool // its guards held: it is written
	err    error
}

// errClosing answers the writes still queued when the replica closes.
var errClosing = fmt.Errorf("%w: the registry is closing", registryapi.ErrUnavailable)

// submit queues a write for the next group transaction and waits for
// it: whether its guards held, or why etcd was not reached.
func (p *Replica) submit(guards []clientv3.Cmp, ops []clientv3.Op) (bool, error) {
	w := &pendingWrite{guards: guards, ops: ops, done: make(chan struct{})}
	for _, op := range ops {
		w.bytes += len(op.KeyBytes()) + len(op.ValueBytes())
	}
	g := &p.group
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false, errClosing
	}
	g.queue = append(g.queue, w)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	<-w.done
	return w.held, w.err
}

// A group is sent when the one before it is answered, so that the
// writes that came meanwhile go together: one group in flight carries
// the most writes a round (measured: two or four in flight carry fewer
// writes each, and etcd, applying each put on every member, does less).
// A group not answered within slowGroup (a leader that died with it, a
// transaction that waits out EtcdTimeout) no longer holds the next, up
// to maxGroupsInFlight.
const (
	slowGroup         = 250 * time.Millisecond
	maxGroupsInFlight = 4
)

// commitLoop sends what is queued, a group at a time, until close; the
// writes still queued then are refused.
func (p *Replica) commitLoop() {
	defer p.wg.Done()
	g := &p.group
	inFlight := make(chan struct{}, maxGroupsInFlight)
	slow := time.NewTimer(slowGroup)
	defer slow.Stop()
	for {
		select {
		case <-p.ctx.Done():
			g.mu.Lock()
			q := g.queue
			g.queue, g.closed = nil, true
			g.mu.Unlock()
			for _, w := range q {
				w.err = errClosing
				close(w.done)
			}
			return
		case <-g.wake:
		}
		for p.ctx.Err() == nil {
			group := g.take()
			if len(group) == 0 {
				break
			}
			select {
			case inFlight <- struct{}{}:
			case <-p.ctx.Done():
				// Answered by the close above, with the rest of the queue.
				g.mu.Lock()
				g.queue = append(group, g.queue...)
				g.mu.Unlock()
				continue
			}
			answered := make(chan struct{})
			p.wg.Go(func() {
				p.commitGroup(group)
				<-inFlight
				close(answered)
			})
			slow.Reset(slowGroup)
			select {
			case <-answered:
			case <-slow.C:
			case <-p.ctx.Done():
			}
		}
	}
}

// size is what a write counts against --max-txn-ops, nested: the more
// of its compares and its operations.
func (w *pendingWrite) size() int { return max(len(w.ops), len(w.guards)) }

// txnOps is what etcd counts of a group: a nested transaction's
// operations count against what the outer one leaves.
func txnOps(writes, largest int) int { return writes + largest }

// take removes the next group from the queue, in queue order, within
// etcd's limits. The writes queued never share a key: each claimed its
// keys before it was queued.
func (g *groupCommit) take() []*pendingWrite {
	g.mu.Lock()
	defer g.mu.Unlock()
	var group []*pendingWrite
	rest := g.queue[:0]
	largest, bytes := 0, 0
	for _, w := range g.queue {
		if len(group) > 0 && (txnOps(len(group)+1, max(largest, w.size())) > g.maxOps || bytes+w.bytes > g.maxBytes) {
			rest = append(rest, w)
			continue
		}
		group = append(group, w)
		largest, bytes = max(largest, w.size()), bytes+w.bytes
	}
	clear(g.queue[len(rest):])
	g.queue = rest
	return group
}

// commitGroup sends one group and answers its writes. A write alone goes
// as it is; several go nested. A group etcd refuses as too large is
// queued again, first, and the limit it broke lowered.
func (p *Replica) commitGroup(group []*pendingWrite) {
	if len(group) == 1 {
		w := group[0]
		resp, err := p.commit(w.guards, w.ops)
		w.held, w.err = err == nil && resp.Succeeded, err
		close(w.done)
		return
	}
	ops := make([]clientv3.Op, len(group))
	for i, w := range group {
		ops[i] = clientv3.OpTxn(w.guards, w.ops, nil)
	}
	resp, err := p.commit(nil, ops)
	if p.refusedAsTooLarge(err, group) {
		return
	}
	for i, w := range group {
		w.err = err
		if err == nil {
			w.held = resp.Responses[i].GetResponseTxn().GetSucceeded()
		}
		close(w.done)
	}
}

// refusedAsTooLarge lowers the limit a refused group broke and queues
// the group again, first; false when err is not such a refusal.
func (p *Replica) refusedAsTooLarge(err error, group []*pendingWrite) bool {
	ops, size := errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge)
	if !ops && !size {
		return false
	}
	g := &p.group
	g.mu.Lock()
	if ops {
		// etcd does not say its limit: come down in steps of a quarter
		// from what this group asked for.
		largest := 0
		for _, w := range group {
			largest = max(largest, w.size())
		}
		g.maxOps = max(min(g.maxOps, txnOps(len(group), largest))*3/4, 2)
	} else {
		g.maxBytes = max(g.maxBytes*3/4, 1)
	}
	maxOps, maxBytes := g.maxOps, g.maxBytes
	g.queue = append(group, g.queue...)
	g.mu.Unlock()
	p.opts.Logger.Warn("etcd refused a group of writes as too large: sending smaller groups", "replica", p.opts.ID,
		"writes", len(group), "maxTxnOps", maxOps, "maxTxnBytes", maxBytes, "err", err)
	return true
}
