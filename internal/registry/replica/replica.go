// Package replica keeps one registry process in step with the others
// over one etcd: it loads and watches the registry's keys into the
// registry's memory, commits writes as guarded transactions, shares lease
// renewals as digests and elects the coordinator that evicts. It sees the
// registry only through Memory, and imports no HTTP, no front and nothing
// of probes/, commands/, tui/ or migrate/ (internal/architecture checks).
package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/shardctl/shardctl/internal/logs"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// A replica is one registry process among several over one etcd. Reads
// are served from memory, kept fresh by a watch of the registry's keys;
// writes are etcd transactions guarded by the key revisions this replica
// saw, answered once the watch has brought them back. Leases stay in
// memory, as Eureka keeps them: a renewal is not an etcd write. Each
// replica instead publishes, twice a second, the leases it renewed (its
// digest, one key under its own etcd lease), and every replica applies
// the others' digests, so a renewal sent to any replica keeps the lease
// on all of them. One replica, the coordinator, elected through etcd,
// evicts expired leases.

// DefaultSessionTTL is the etcd lease of a replica's own keys: a replica
// that died stops counting, and hands over, this long after.
const DefaultSessionTTL = 5 * time.Second

// Options configure a replica over etcd.
type Options struct {
	// ID names the replica among the others (the etcd member's name too
	// when it embeds one).
	ID string
	// Coordinators are the replicas preferred as coordinator; nil leaves
	// the list the replicas share as it is, an empty list clears it.
	Coordinators []string
	// SessionTTL is the etcd lease of the replica's own keys (membership,
	// digest, candidacy): how long a replica that died is still counted.
	SessionTTL time.Duration
	// DigestInterval is how often renewals are published.
	DigestInterval time.Duration
	// Cutoff is how stale the replica's view may be before it reports not
	// ready and stops evicting.
	Cutoff time.Duration
	// MaxTxnOps is the etcd server's --max-txn-ops: writes waiting
	// together go as one transaction of at most this many operations
	// (etcd's default, 128, when zero; a server that allows fewer is
	// learnt from its refusal).
	MaxTxnOps int
	// LeaderChanged, when set, gives a channel closed when the etcd
	// member this replica talks to sees a new leader (an embedded
	// member's: store.EmbeddedMember.LeaderChanged); the writes in flight
	// then are answered at once (leader.go). Nil: they wait out
	// EtcdTimeout.
	LeaderChanged func() <-chan struct{}
	Logger        *slog.Logger
}

func (o *Options) defaults() {
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.DigestInterval <= 0 {
		o.DigestInterval = 500 * time.Millisecond
	}
	if o.Cutoff <= 0 {
		o.Cutoff = 3 * time.Second
	}
	if o.MaxTxnOps <= 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Memory is the registry's in-memory state, which a replica keeps equal
// to what etcd holds. Lock guards what the Locked methods read and write,
// and the plans a Write makes; a replica holds it for no network call.
type Memory interface {
	Lock()
	Unlock()
	// Now is the registry's clock.
	Now() time.Time
	// ApplyLocked applies a batch read from etcd (or planned for it).
	ApplyLocked(b *store.Batch, now time.Time)
	// SlotsLocked is every instance's key slot; the replica only reads it.
	SlotsLocked() map[registryapi.InstanceRef]int
	// ExtendLeases applies another replica's digest of renewals (app →
	// id → Unix ms), taking the lock itself.
	ExtendLeases(renewed map[string]map[string]int64)
}

// DefaultMaxTxnOps is etcd's own default --max-txn-ops.
const DefaultMaxTxnOps = 128

// maxTxnBytes bounds one group transaction's keys and values, under
// etcd's default request limit (1.5 MiB) with room for the rest.
const maxTxnBytes = 1 << 20

// maxWriteAttempts bounds how often a write that lost a race to another
// replica is planned again: a key that replicas write at once (the slots
// of shards registering together through several) is written by one a
// transaction, so a burst needs a few rounds.
const maxWriteAttempts = 16

type Replica struct {
	mem  Memory
	st   *store.Etcd
	opts Options

	ctx    context.Context
	cancel context.CancelFunc
	// watchCtx carries the watch's gRPC metadata: a progress request must
	// go on the same stream.
	watchCtx context.Context
	wg       sync.WaitGroup
	closed   sync.Once

	// revs is each state key's mod revision as memory holds it; under mem's lock.
	revs map[string]int64

	mu           sync.Mutex // applied, freshness, cluster view
	applied      int64
	appliedCh    chan struct{} // closed when applied moves
	check        *freshCheck
	freshAt      time.Time       // the view was etcd's as of then
	contactSince time.Time       // start of the current run of contact
	members      map[string]bool // alive: their key exists
	electionKeys map[string]candidate
	coordinators []string
	viewChanged  chan struct{} // cap 1: members, list or election moved

	loaded      atomic.Bool // memory holds what etcd held at start
	coordinator atomic.Bool
	// fence is the election key this replica won with, while it
	// coordinates: its writes as coordinator hold only while that key
	// exists, so a replica that lost its lease unaware (paused, cut off)
	// writes nothing as coordinator.
	fence     atomic.Pointer[fence]
	fenceLost chan struct{} // cap 1: a write as coordinator found the key gone
	session   atomic.Pointer[concurrency.Session]

	pendingMu sync.Mutex
	pending   map[registryapi.InstanceRef]int64 // renewals since the last digest

	repeats *logs.Repeats // etcd errors, which repeat while etcd is away

	group groupCommit
	// term ends when etcd's leader changes, and with it the writes in
	// flight (leader.go); commitsInFlight counts those.
	term            atomic.Pointer[term]
	commitsInFlight atomic.Int64
}

// freshCheck is a quorum read's revision, and when it was asked: once
// the watch reaches that revision, the view was fresh as of then.
type freshCheck struct {
	at  time.Time
	rev int64
}

// fence is an election key and the revision it was created at.
type fence struct {
	key string
	rev int64
}

type candidate struct {
	created int64
	id      string
}

// New makes the replica of mem over st; Start loads and follows etcd.
func New(mem Memory, st *store.Etcd, opts Options) (*Replica, error) {
	opts.defaults()
	if opts.ID == "" {
		return nil, errors.New("a replica over etcd needs an id (--id)")
	}
	if err := registryapi.CheckName("replica id", opts.ID); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Replica{
		mem: mem, st: st, opts: opts, ctx: ctx, cancel: cancel,
		watchCtx:  clientv3.WithRequireLeader(ctx),
		revs:      map[string]int64{},
		appliedCh: make(chan struct{}), members: map[string]bool{}, electionKeys: map[string]candidate{},
		viewChanged: make(chan struct{}, 1), fenceLost: make(chan struct{}, 1), pending: map[registryapi.InstanceRef]int64{},
		repeats: logs.NewRepeats(opts.Logger, 0, nil),
		group:   groupCommit{maxOps: opts.MaxTxnOps, maxBytes: maxTxnBytes, wake: make(chan struct{}, 1), writing: map[string]chan struct{}{}},
	}
	p.term.Store(newTerm())
	return p, nil
}

// Start loads what etcd holds, in the background: until it has (etcd may
// be starting too, as the members of a new cluster do together), the
// replica answers 503 and reports not ready.
func (p *Replica) Start() {
	p.wg.Add(2)
	go p.run()
	go p.commitLoop()
	if p.opts.LeaderChanged != nil {
		p.wg.Add(1)
		go p.leaderLoop()
	}
}

func (p *Replica) run() {
	defer p.wg.Done()
	for {
		err := p.resync()
		if err == nil && p.opts.Coordinators != nil {
			ctx, cancel := context.WithTimeout(p.ctx, store.EtcdTimeout)
			_, err = p.st.Client.Put(ctx, p.st.Prefix+store.KeyCoordinators, strings.Join(p.opts.Coordinators, ","))
			cancel()
		}
		if err == nil {
			break
		}
		p.repeats.Log(slog.LevelWarn, "waiting for etcd", "waiting for etcd", "replica", p.opts.ID, "err", err)
		select {
		case <-time.After(time.Second):
		case <-p.ctx.Done():
			return
		}
	}
	p.loaded.Store(true)
	p.opts.Logger.Info("replica loaded the registry from etcd", "replica", p.opts.ID, "revision", p.appliedRev())
	p.wg.Add(4)
	go p.watchLoop()
	go p.heartbeatLoop()
	go p.digestLoop()
	go p.campaignLoop()
}

// Close stops the loops and waits for them; the session's lease is
// revoked, so the others see this replica leave at once. Safe twice.
func (p *Replica) Close() {
	p.closed.Do(func() {
		p.cancel()
		p.wg.Wait()
		p.repeats.FlushAll()
	})
}

// resync reads every key and brings memory to what etcd holds: the start,
// and a watch that fell behind a compaction.
func (p *Replica) resync() error {
	at := time.Now()
	resp, err := p.st.GetAll(p.ctx)
	if err != nil {
		return err
	}
	m := p.mem
	var b store.Batch
	seen := map[string]bool{}
	view := map[string]*mvccpb.KeyValue{}
	var changes []decoded
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), p.st.Prefix)
		if !store.IsStateKey(k) {
			view[k] = kv
			continue
		}
		seen[k] = true
		changes = append(changes, decode(k, kv, false))
	}
	m.Lock()
	for _, d := range changes {
		p.stateEvent(d, &b)
	}
	for k := range p.revs {
		if !seen[k] {
			p.stateEvent(decoded{k: k, deleted: true}, &b)
		}
	}
	m.ApplyLocked(&b, m.Now())
	m.Unlock()

	p.mu.Lock()
	clear(p.members)
	clear(p.electionKeys)
	p.coordinators = nil
	for k, kv := range view {
		p.viewEventLocked(k, kv, false)
	}
	p.mu.Unlock()
	p.signalView()
	p.advance(resp.Header.Revision)
	p.mu.Lock()
	p.freshLocked(at) // a quorum read, applied whole
	p.mu.Unlock()
	return nil
}

// decoded is a change of a state key, read before mem's lock is taken:
// every replica decodes every write, and handlers wait on that lock.
type decoded struct {
	k       string
	kv      *mvccpb.KeyValue
	deleted bool
	part    store.Batch     // what the value holds
	slots   *store.AppSlots // or, for slots/APP, the app's whole map
	err     error
}

func decode(k string, kv *mvccpb.KeyValue, deleted bool) decoded {
	d := decoded{k: k, kv: kv, deleted: deleted}
	if !deleted {
		d.slots, d.err = store.DecodeKV(k, kv.Value, &d.part)
	}
	return d
}

// stateEvent adds a decoded change to a batch, and keeps its revision;
// callers hold mem's lock.
func (p *Replica) stateEvent(d decoded, b *store.Batch) {
	k, kv := d.k, d.kv
	if d.deleted {
		delete(p.revs, k)
		switch {
		case strings.HasPrefix(k, store.KeyInstances):
			if ref, ok := store.SplitKeyRef(k[len(store.KeyInstances):]); ok {
				b.Delete = append(b.Delete, ref)
			}
		case strings.HasPrefix(k, store.KeyOverrides):
			if ref, ok := store.SplitKeyRef(k[len(store.KeyOverrides):]); ok {
				b.SetOverride(ref, registryapi.Override{})
			}
		case strings.HasPrefix(k, store.KeySlots):
			p.setSlots(&store.AppSlots{App: k[len(store.KeySlots):]}, b)
		}
		return
	}
	if p.revs[k] == kv.ModRevision {
		return // memory has it (a resync over what the watch applied)
	}
	p.revs[k] = kv.ModRevision
	if d.err != nil {
		// A value no replica wrote; skip it rather than stop the watch.
		p.opts.Logger.Error("etcd key skipped", "err", d.err)
		return
	}
	b.Add(&d.part)
	if d.slots != nil {
		p.setSlots(d.slots, b)
	}
}

// setSlots turns an app's whole slot map into changes against memory.
func (p *Replica) setSlots(s *store.AppSlots, b *store.Batch) {
	if b.Slots == nil {
		b.Slots = map[registryapi.InstanceRef]int{}
	}
	slots := p.mem.SlotsLocked()
	for ref := range slots {
		if _, ok := s.IDs[ref.ID]; ref.App == s.App && !ok {
			b.Slots[ref] = 0
		}
	}
	for id, n := range s.IDs {
		if ref := (registryapi.InstanceRef{App: s.App, ID: id}); slots[ref] != n {
			b.Slots[ref] = n
		}
	}
}

// viewEventLocked follows the replicas' own keys; callers hold p.mu.
func (p *Replica) viewEventLocked(k string, kv *mvccpb.KeyValue, deleted bool) {
	switch {
	case strings.HasPrefix(k, store.KeyMembers):
		id := k[len(store.KeyMembers):]
		if deleted {
			delete(p.members, id)
		} else {
			p.members[id] = true
		}
	case strings.HasPrefix(k, store.KeyElection):
		if deleted {
			delete(p.electionKeys, k)
		} else {
			p.electionKeys[k] = candidate{created: kv.CreateRevision, id: string(kv.Value)}
		}
	case k == store.KeyCoordinators:
		p.coordinators = nil
		if !deleted {
			p.coordinators = store.ParseCoordinators(string(kv.Value))
		}
	}
}

func (p *Replica) signalView() {
	select {
	case p.viewChanged <- struct{}{}:
	default:
	}
}

// watchLoop applies every change under the prefix, one etcd revision at
// a time, until close.
func (p *Replica) watchLoop() {
	defer p.wg.Done()
	for p.ctx.Err() == nil {
		wctx, cancel := context.WithCancel(p.watchCtx)
		wch := p.st.Client.Watch(wctx, p.st.Prefix, clientv3.WithPrefix(), clientv3.WithRev(p.appliedRev()+1))
		for resp := range wch {
			if resp.CompactRevision != 0 {
				// Fell behind a compaction: what it missed is gone from the
				// history, read it whole.
				if err := p.resync(); err != nil {
					p.repeats.Log(slog.LevelWarn, "etcd resync failed", "etcd resync failed", "replica", p.opts.ID, "err", err)
				}
				break
			}
			if resp.Err() != nil {
				break
			}
			if resp.IsProgressNotify() {
				p.advance(resp.Header.Revision)
				continue
			}
			for i := 0; i < len(resp.Events); {
				j := i + 1
				for j < len(resp.Events) && resp.Events[j].Kv.ModRevision == resp.Events[i].Kv.ModRevision {
					j++
				}
				p.apply(resp.Events[i:j])
				p.advance(resp.Events[i].Kv.ModRevision)
				i = j
			}
		}
		cancel()
		select {
		case <-p.ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// apply applies the events of one revision.
func (p *Replica) apply(evs []*clientv3.Event) {
	m := p.mem
	var b store.Batch
	var digests []*mvccpb.KeyValue
	view := false
	keys, changes := make([]string, len(evs)), make([]decoded, len(evs))
	for i, ev := range evs {
		keys[i] = strings.TrimPrefix(string(ev.Kv.Key), p.st.Prefix)
		if store.IsStateKey(keys[i]) {
			changes[i] = decode(keys[i], ev.Kv, ev.Type == mvccpb.DELETE)
		}
	}
	m.Lock()
	for i, ev := range evs {
		k, deleted := keys[i], ev.Type == mvccpb.DELETE
		switch {
		case store.IsStateKey(k):
			p.stateEvent(changes[i], &b)
		case strings.HasPrefix(k, store.KeyRenewals):
			if !deleted && k[len(store.KeyRenewals):] != p.opts.ID {
				digests = append(digests, ev.Kv)
			}
		default:
			p.mu.Lock()
			p.viewEventLocked(k, ev.Kv, deleted)
			p.mu.Unlock()
			view = true
		}
	}
	if !b.Empty() {
		m.ApplyLocked(&b, m.Now())
	}
	m.Unlock()
	for _, kv := range digests {
		p.applyDigest(kv.Value)
	}
	if view {
		p.signalView()
	}
}

func (p *Replica) appliedRev() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied
}

// advance notes that memory holds etcd's state up to rev.
func (p *Replica) advance(rev int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rev > p.applied {
		p.applied = rev
		close(p.appliedCh)
		p.appliedCh = make(chan struct{})
	}
	if p.check != nil && p.applied >= p.check.rev {
		p.freshLocked(p.check.at)
		p.check = nil
	}
}

func (p *Replica) freshLocked(at time.Time) {
	if at.Before(p.freshAt) {
		return
	}
	if p.freshAt.IsZero() || at.Sub(p.freshAt) > p.opts.Cutoff {
		p.contactSince = at
	}
	p.freshAt = at
}

// waitApplied waits until memory holds revision rev.
func (p *Replica) waitApplied(ctx context.Context, rev int64) error {
	for {
		p.mu.Lock()
		applied, ch := p.applied, p.appliedCh
		p.mu.Unlock()
		if applied >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// heartbeatLoop proves, twice a second, that this replica's view is
// etcd's: a quorum read gives the current revision, and a progress
// request makes the watch report when it has reached it.
func (p *Replica) heartbeatLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.DigestInterval)
	defer t.Stop()
	cutOff := false // as logged last
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		if now := p.cutOff(); now != cutOff {
			cutOff = now
			if cutOff {
				p.opts.Logger.Warn("replica cut off from etcd: not ready, reads stale, writes refused, no eviction", "replica", p.opts.ID, "staleness", p.Staleness().Round(time.Millisecond).String())
			} else {
				p.opts.Logger.Info("replica in touch with etcd again", "replica", p.opts.ID)
			}
		}
		p.repeats.Flush()
		at := time.Now()
		ctx, cancel := context.WithTimeout(p.ctx, p.opts.Cutoff/2)
		resp, err := p.st.Client.Get(ctx, p.st.Prefix+store.KeyCoordinators)
		cancel()
		if err != nil && p.ctx.Err() == nil {
			p.repeats.Log(slog.LevelWarn, "etcd read failed", "etcd read failed", "replica", p.opts.ID, "err", err)
		}
		if err == nil {
			p.mu.Lock()
			if p.applied >= resp.Header.Revision {
				p.freshLocked(at)
			} else if p.check == nil {
				p.check = &freshCheck{at: at, rev: resp.Header.Revision}
			}
			p.mu.Unlock()
			ctx, cancel := context.WithTimeout(p.watchCtx, p.opts.Cutoff/2)
			_ = p.st.Client.RequestProgress(ctx)
			cancel()
		}
	}
}

// digestLoop publishes the digest of renewals twice a second. It is a
// loop of its own, not a step of the heartbeat's: a digest put lost with
// an etcd leader that died waits out its timeout, and the heartbeat
// behind it could not prove the view fresh once the next leader was
// elected: the replica reported itself cut off and refused every write
// for up to 3.5 s more (TestKillCoordinatorUnderRegistrations).
func (p *Replica) digestLoop() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.DigestInterval)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		p.flushDigest()
	}
}

// Staleness is how long ago the view was last known to be etcd's.
func (p *Replica) Staleness() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(time.Since(p.freshAt)-p.opts.DigestInterval, 0)
}

// Cutoff is how stale the replica may be before it reports not ready.
func (p *Replica) Cutoff() time.Duration { return p.opts.Cutoff }

// Loaded says whether memory holds what etcd held at start.
func (p *Replica) Loaded() bool { return p.loaded.Load() }

// Ready is nil while the replica serves what etcd holds.
func (p *Replica) Ready() error {
	if !p.loaded.Load() {
		return registryapi.ErrNotLoaded
	}
	if stale := p.Staleness(); stale > p.opts.Cutoff {
		return fmt.Errorf("%w: cut off from etcd for %s: reads show what it saw then, writes fail, it does not evict", registryapi.ErrUnavailable, stale.Round(time.Millisecond))
	}
	return nil
}

// cutOff says whether the replica has lost etcd.
func (p *Replica) cutOff() bool { return p.Staleness() > p.opts.Cutoff }

// MayEvict: the coordinator evicts only while its view is fresh, and has
// been long enough for the other replicas' digests to reach it.
func (p *Replica) MayEvict() bool {
	if !p.coordinator.Load() || p.cutOff() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Since(p.contactSince) >= 2*p.opts.DigestInterval+p.opts.Cutoff
}

// Write makes a change over etcd: planned against memory, committed if no
// key it read has moved since (with the writes waiting beside it, in one
// transaction: group.go), and answered once the watch applied it. A
// write that lost a race to another replica is planned again on the
// newer memory; one that touches a key this replica is writing already
// waits for that write, and is planned after it.
func (p *Replica) Write(plan func(now time.Time) (*store.Batch, error)) error {
	return p.write(plan, nil)
}

// WriteAsCoordinator is Write for what only the coordinator does
// (eviction): committed only while the election key this replica won
// with still exists. A replica whose session ended while it could not
// tell (paused past its lease, cut off) is refused by etcd, and gets
// ErrNotCoordinator.
func (p *Replica) WriteAsCoordinator(plan func(now time.Time) (*store.Batch, error)) error {
	f := p.fence.Load()
	if f == nil || !p.coordinator.Load() {
		return ErrNotCoordinator
	}
	return p.write(plan, f)
}

// ErrNotCoordinator refuses a coordinator's write from a replica that is
// not, or no longer, the coordinator.
var ErrNotCoordinator = errors.New("not the coordinator: its election key is gone (its etcd lease ended)")

func (p *Replica) write(plan func(now time.Time) (*store.Batch, error), f *fence) error {
	m := p.mem
	if stale := p.Staleness(); stale > p.opts.Cutoff {
		return fmt.Errorf("%w: cut off from etcd for %s", registryapi.ErrUnavailable, stale.Round(time.Millisecond))
	}
	for attempt := 1; ; {
		m.Lock()
		now := m.Now()
		b, err := plan(now)
		if err != nil || b == nil {
			m.Unlock()
			return err
		}
		ops, keys, err := p.st.Txn(b, p.slotsAfter(b))
		if err != nil {
			m.Unlock()
			return err
		}
		guards := make([]clientv3.Cmp, len(keys), len(keys)+1)
		for i, k := range keys {
			guards[i] = clientv3.Compare(clientv3.ModRevision(p.st.Prefix+k), "=", p.revs[k])
		}
		if f != nil {
			guards = append(guards, clientv3.Compare(clientv3.CreateRevision(f.key), "=", f.rev))
		}
		busy := p.group.claim(keys)
		m.Unlock()
		if busy != nil {
			select {
			case <-busy:
				continue
			case <-p.ctx.Done():
				return errClosing
			}
		}

		held, err := p.submit(guards, ops)
		p.group.release(keys)
		switch {
		case err != nil:
			return err
		case held:
			return nil
		case f != nil && !p.fenceHolds(f):
			// Step down now: the campaign loop hears it and stands again.
			p.coordinator.Store(false)
			select {
			case p.fenceLost <- struct{}{}:
			default:
			}
			return ErrNotCoordinator
		case attempt == maxWriteAttempts:
			return fmt.Errorf("%w: changed on another replica %d times while this one wrote; try again", registryapi.ErrConflict, attempt)
		}
		// Lost to another replica: step aside a moment, so that two
		// replicas writing one key do not meet again at once.
		select {
		case <-time.After(rand.N(time.Duration(attempt) * 5 * time.Millisecond)):
		case <-p.ctx.Done():
			return errClosing
		}
		attempt++
	}
}

// fenceHolds reads whether the election key of f still exists as
// created; an etcd that does not answer counts as not.
func (p *Replica) fenceHolds(f *fence) bool {
	ctx, cancel := context.WithTimeout(p.ctx, store.EtcdTimeout)
	defer cancel()
	resp, err := p.st.Client.Get(ctx, f.key)
	return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == f.rev
}

// commit sends a transaction and waits until the watch has applied it.
// A member without a leader refuses it at once (nothing was written), and
// it is sent again until etcdTimeout; a proposal lost with a leader that
// died is not known to be lost, and fails when the member sees the next
// leader (LeaderChanged), else at etcdTimeout.
func (p *Replica) commit(guards []clientv3.Cmp, ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(p.ctx), store.EtcdTimeout)
	defer cancel()
	for {
		tctx, stop := p.inTerm(ctx)
		resp, err := p.st.Client.Txn(tctx).If(guards...).Then(ops...).Commit()
		if stop() && err != nil && ctx.Err() == nil {
			err = lostWithLeader()
			p.repeats.Log(slog.LevelWarn, "etcd write failed", "etcd write failed", "replica", p.opts.ID, "err", err)
			return nil, err
		}
		if errors.Is(err, rpctypes.ErrNoLeader) {
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-ctx.Done():
			}
		}
		if err == nil {
			err = p.waitApplied(ctx, resp.Header.Revision)
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				err = fmt.Errorf("%w: etcd did not answer within %v (is a leader being elected?): %v", registryapi.ErrUnavailable, store.EtcdTimeout, err)
			} else {
				err = fmt.Errorf("%w: etcd: %w", registryapi.ErrUnavailable, err)
			}
			p.repeats.Log(slog.LevelWarn, "etcd write failed", "etcd write failed", "replica", p.opts.ID, "err", err)
			return nil, err
		}
		return resp, nil
	}
}

// slotsAfter gives the whole slot map of an app after a batch; callers
// hold mem's lock.
func (p *Replica) slotsAfter(b *store.Batch) func(app string) map[string]int {
	return func(app string) map[string]int {
		ids := map[string]int{}
		for ref, n := range p.mem.SlotsLocked() {
			if ref.App == app {
				ids[ref.ID] = n
			}
		}
		for ref, n := range b.Slots {
			if ref.App != app {
				continue
			}
			if n == 0 {
				delete(ids, ref.ID)
			} else {
				ids[ref.ID] = n
			}
		}
		return ids
	}
}

// Renewed notes a renewal for the next digest.
func (p *Replica) Renewed(ref registryapi.InstanceRef, at int64) {
	p.pendingMu.Lock()
	p.pending[ref] = at
	p.pendingMu.Unlock()
}

// digest is the value of renewals/ID: app → id → last renewal (Unix ms).
type digest = map[string]map[string]int64

func (p *Replica) flushDigest() {
	s := p.session.Load()
	if s == nil {
		return
	}
	p.pendingMu.Lock()
	pending := p.pending
	if len(pending) > 0 {
		p.pending = map[registryapi.InstanceRef]int64{}
	}
	p.pendingMu.Unlock()
	if len(pending) == 0 {
		return
	}
	d := digest{}
	for ref, at := range pending {
		if d[ref.App] == nil {
			d[ref.App] = map[string]int64{}
		}
		d[ref.App][ref.ID] = at
	}
	enc, _ := json.Marshal(d)
	ctx, cancel := context.WithTimeout(p.ctx, store.EtcdTimeout)
	_, err := p.st.Client.Put(ctx, p.st.Prefix+store.KeyRenewals+p.opts.ID, string(enc), clientv3.WithLease(s.Lease()))
	cancel()
	if err != nil {
		// Keep them for the next digest, unless newer renewals came.
		p.pendingMu.Lock()
		for ref, at := range pending {
			if p.pending[ref] < at {
				p.pending[ref] = at
			}
		}
		p.pendingMu.Unlock()
	}
}

// applyDigest extends the leases another replica renewed.
func (p *Replica) applyDigest(v []byte) {
	var d digest
	if json.Unmarshal(v, &d) != nil {
		return
	}
	p.mem.ExtendLeases(d)
}

// campaignLoop keeps this replica a candidate for coordinator while it is
// eligible, through sessions that end when etcd is lost.
func (p *Replica) campaignLoop() {
	defer p.wg.Done()
	for p.ctx.Err() == nil {
		s, err := concurrency.NewSession(p.st.Client, concurrency.WithTTL(max(int(p.opts.SessionTTL/time.Second), 1)), concurrency.WithContext(p.ctx))
		if err != nil {
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		p.session.Store(s)
		p.runSession(s)
		p.session.Store(nil)
		p.coordinator.Store(false)
		// Revoke on the way out, so the others see this replica go now.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = p.st.Client.Revoke(ctx, s.Lease())
		cancel()
		s.Orphan()
	}
}

func (p *Replica) runSession(s *concurrency.Session) {
	ctx, cancel := context.WithTimeout(p.ctx, store.EtcdTimeout)
	_, err := p.st.Client.Put(ctx, p.st.Prefix+store.KeyMembers+p.opts.ID, p.opts.ID, clientv3.WithLease(s.Lease()))
	cancel()
	if err != nil {
		return
	}
	el := concurrency.NewElection(s, strings.TrimSuffix(p.st.Prefix+store.KeyElection, "/"))
	for {
		// Wait until eligible, holding no candidacy meanwhile.
		for !p.eligible() {
			if p.holdsCandidacy(s) && !p.withdraw(s) {
				return
			}
			select {
			case <-p.ctx.Done():
				return
			case <-s.Done():
				return
			case <-p.viewChanged:
			}
		}
		cctx, stop := context.WithCancel(p.ctx)
		won := make(chan error, 1)
		go func() { won <- el.Campaign(cctx, p.opts.ID) }()
		ended := p.candidacy(s, el, won)
		stop()
		<-won
		p.coordinator.Store(false)
		p.fence.Store(nil)
		if ended || !p.withdraw(s) {
			return
		}
	}
}

// candidacyKey is where this session's campaign puts its key, as
// concurrency.Election names it: the prefix and the lease in hex.
func (p *Replica) candidacyKey(s *concurrency.Session) string {
	return fmt.Sprintf("%s%x", store.KeyElection, s.Lease())
}

// holdsCandidacy says whether the view still shows this session's key.
func (p *Replica) holdsCandidacy(s *concurrency.Session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.electionKeys[p.candidacyKey(s)]
	return ok
}

// withdraw deletes this session's key, however the campaign ended. A
// Resign that timed out on a slow etcd, or a Campaign cancelled after its
// put had landed, leaves the key in place for as long as the session
// lives, ahead of every later candidate: no one else could win. It tries
// until etcd answers, and says false when the session or the replica ended
// first.
func (p *Replica) withdraw(s *concurrency.Session) bool {
	for {
		ctx, cancel := context.WithTimeout(p.ctx, store.EtcdTimeout)
		_, err := p.st.Client.Delete(ctx, p.st.Prefix+p.candidacyKey(s))
		cancel()
		if err == nil {
			return true
		}
		p.repeats.Log(slog.LevelWarn, "withdrawing from the election failed", "withdrawing from the election failed, retrying", "replica", p.opts.ID, "err", err)
		select {
		case <-p.ctx.Done():
			return false
		case <-s.Done():
			return false
		case <-time.After(time.Second):
		}
	}
}

// candidacy waits while the replica campaigns or coordinates; it returns
// when the replica is no longer eligible (false) or the session or the
// replica ends (true).
func (p *Replica) candidacy(s *concurrency.Session, el *concurrency.Election, won chan error) bool {
	for {
		select {
		case err := <-won:
			won <- err // for the caller, who resigns
			if err != nil {
				return true
			}
			select { // a refusal of an earlier term is no news
			case <-p.fenceLost:
			default:
			}
			p.fence.Store(&fence{key: el.Key(), rev: el.Rev()})
			p.coordinator.Store(true)
			p.opts.Logger.Info("replica became coordinator: it evicts", "replica", p.opts.ID)
			for p.eligible() {
				select {
				case <-p.ctx.Done():
					p.opts.Logger.Info("replica no longer coordinator", "replica", p.opts.ID, "reason", "stopping")
					return true
				case <-s.Done():
					p.opts.Logger.Warn("replica no longer coordinator", "replica", p.opts.ID, "reason", "its etcd session ended")
					return true
				case <-p.fenceLost:
					p.opts.Logger.Warn("replica no longer coordinator", "replica", p.opts.ID, "reason", "etcd refused its write as coordinator: its election key is gone")
					return false
				case <-p.viewChanged:
				}
			}
			p.mu.Lock()
			preferred := slices.Clone(p.coordinators)
			p.mu.Unlock()
			p.opts.Logger.Info("replica no longer coordinator", "replica", p.opts.ID, "reason", "handing over to a preferred coordinator", "coordinators", preferred)
			return false
		case <-p.ctx.Done():
			return true
		case <-s.Done():
			return true
		case <-p.viewChanged:
			if !p.eligible() {
				return false
			}
		}
	}
}

// eligible: with a list, the listed replicas stand; the others only while
// none of the listed is alive.
func (p *Replica) eligible() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.coordinators) == 0 || slices.Contains(p.coordinators, p.opts.ID) {
		return true
	}
	return !slices.ContainsFunc(p.coordinators, func(id string) bool { return p.members[id] })
}

func (p *Replica) Status() *registryapi.ReplicaStatus {
	stale := p.Staleness()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := &registryapi.ReplicaStatus{
		ID: p.opts.ID, IsCoordinator: p.coordinator.Load(), Members: []string{},
		Coordinators: append([]string{}, p.coordinators...), Staleness: stale.Round(time.Millisecond).String(),
		CutOff: stale > p.opts.Cutoff, Revision: p.applied,
	}
	for id := range p.members {
		st.Members = append(st.Members, id)
	}
	slices.Sort(st.Members)
	var first *candidate
	for _, c := range p.electionKeys {
		if first == nil || c.created < first.created {
			c := c
			first = &c
		}
	}
	if first != nil {
		st.Coordinator = first.id
	}
	return st
}
