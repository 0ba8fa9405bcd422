// Package registry is the federation's control plane: which shards exist,
// where, in which pool and state, and the deployment ledger. It speaks
// Netflix Eureka's REST API so existing Eureka clients register with it
// unchanged, without Eureka's delays: leases end at last renewal +
// duration, eviction runs every few seconds, reads are served from a
// snapshot rebuilt on change, and watchers are pushed changes.
// This package is the core (leases, eviction and self-preservation,
// shards and slots, the ledger, cutover records, the read snapshot, the
// group commit to its store) and the process (Server). Its HTTP front is
// internal/registry/httpfront, its replication internal/registry/replica,
// its stores internal/registry/store, its wire types and client
// registryapi and registryclient.
// It is a runtime's: it never imports probes/, commands/, tui/ or migrate/
// (internal/architecture checks).
package registry

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/logs"
	"github.com/shardctl/shardctl/internal/registry/httpfront"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/replica"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// Change is one change to an instance, as deltas and watchers see it.
type Change struct {
	Version  uint64
	Action   string                // ADDED, MODIFIED, DELETED, LEDGER or CUTOVER
	Instance *registryapi.Instance // nil for LEDGER and CUTOVER
	Seq      int                   // LEDGER: the deployment appended or updated
	Cutover  string                // CUTOVER: the record written
	At       time.Time
}

// DefaultEvictionInterval is how often expired leases are evicted: a dead
// instance is gone within its lease and one second more.
const DefaultEvictionInterval = time.Second

// DefaultReadStaleness: a full or delta fetch shows a write 5 ms after it
// at the latest (Eureka's response cache: 30 s).
const DefaultReadStaleness = 5 * time.Millisecond

// Options of a registry.
type Options struct {
	// LeaseDuration is used when an instance does not give its own.
	LeaseDuration    time.Duration
	EvictionInterval time.Duration
	SelfPreservation bool
	RenewalThreshold float64
	// ShardsApp is the application whose instances are shards: they get a
	// slot (1-31) that stays theirs across re-registrations.
	ShardsApp string
	// DeltaRetention is how long a change stays in deltas (Eureka: 3 min).
	DeltaRetention time.Duration
	// ReadStaleness is how long after a write a fetch may still not show
	// it (default DefaultReadStaleness; negative: every fetch shows every
	// write acknowledged before it).
	ReadStaleness time.Duration
	Store         store.Store
	// Replica configures this registry as one of several over an etcd
	// store; unused with the other stores.
	Replica replica.Options
	Now     func() time.Time
	// Logger gets one line per state change: instances registered,
	// deregistered and evicted, states and slots, self-preservation on
	// and off, the ledger and cutover records, the store failing (nil:
	// none). The replica logs there too unless Replica.Logger is set.
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = registryapi.DefaultLeaseDuration * time.Second
	}
	if o.EvictionInterval <= 0 {
		o.EvictionInterval = DefaultEvictionInterval
	}
	if o.RenewalThreshold <= 0 {
		o.RenewalThreshold = 0.85
	}
	if o.ShardsApp == "" {
		o.ShardsApp = registryapi.DefaultShardsApp
	}
	o.ShardsApp = strings.ToUpper(o.ShardsApp)
	if o.DeltaRetention <= 0 {
		o.DeltaRetention = 3 * time.Minute
	}
	if o.ReadStaleness == 0 {
		o.ReadStaleness = DefaultReadStaleness
	}
	if o.Store == nil {
		o.Store = store.NewMemoryStore()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Logger = logs.Or(o.Logger)
	if o.Replica.Logger == nil {
		o.Replica.Logger = o.Logger
	}
}

type lease struct {
	inst        *registryapi.Instance // replaced, never changed in place: readers hold it
	lastRenewal atomic.Int64
	duration    time.Duration
	static      bool
}

func (l *lease) expired(now time.Time) bool {
	return !l.static && now.UnixMilli() > l.lastRenewal.Load()+l.duration.Milliseconds()
}

// Registry holds instances, leases, overrides, slots and the ledger.
type Registry struct {
	opts Options

	mu          sync.RWMutex
	apps        map[string]map[string]*lease
	overrides   map[registryapi.InstanceRef]registryapi.Override
	slots       map[registryapi.InstanceRef]int
	deployments []ledger.Deployment
	cutovers    map[string]registryapi.Cutover // by name
	version     uint64
	changes     []Change // recent changes, oldest first
	changed     chan struct{}
	dropped     uint64 // highest version no longer in changes

	renewals *rateWindow
	started  time.Time
	evicted  atomic.Int64

	// The read snapshot (snapshot.go): dirty and wanted change under mu,
	// view under rebuildMu.
	snap       atomic.Pointer[snapshot]
	dirty      map[registryapi.InstanceRef]struct{}
	dirtySince atomic.Int64  // when the oldest change not in snap was made (Unix ns), 0 if none
	wanted     atomic.Uint64 // the version the snapshot must reach
	rebuildMu  sync.Mutex
	view       view

	commit *committer
	repl   *replica.Replica // over etcd; nil with a local store

	watchEnd chan struct{}
	endOnce  sync.Once
	stop     chan struct{}
	stopMu   sync.Mutex     // orders Run's start against Close
	running  sync.WaitGroup // Run, which Close waits for: it writes the store

	log        *slog.Logger
	repeats    *logs.Repeats // lines that can come by the thousand
	preserving atomic.Bool   // self-preservation holds eviction (as logged)
}

// NewRegistry loads a registry from its store; over etcd it joins the
// other replicas, and loads in the background (see Ready).
func NewRegistry(opts Options) (*Registry, error) {
	opts.defaults()
	es, replicated := opts.Store.(*store.Etcd)
	st := &store.State{}
	if !replicated {
		var err error
		if st, err = opts.Store.Load(); err != nil {
			return nil, fmt.Errorf("load the registry store: %w", err)
		}
	}
	now := opts.Now()
	r := &Registry{
		opts: opts, apps: map[string]map[string]*lease{}, overrides: st.Overrides, slots: st.Slots,
		deployments: st.Deployments, cutovers: map[string]registryapi.Cutover{},
		changed: make(chan struct{}), renewals: &rateWindow{}, started: now,
		stop: make(chan struct{}), watchEnd: make(chan struct{}),
		dirty: map[registryapi.InstanceRef]struct{}{},
		log:   opts.Logger, repeats: logs.NewRepeats(opts.Logger, 0, opts.Now),
	}
	for _, c := range st.Cutovers {
		r.cutovers[c.Name] = c
	}
	if r.overrides == nil {
		r.overrides = map[registryapi.InstanceRef]registryapi.Override{}
	}
	if r.slots == nil {
		r.slots = map[registryapi.InstanceRef]int{}
	}
	for _, in := range st.Instances {
		r.put(in, now)
		r.dirty[registryapi.InstanceRef{App: in.App, ID: in.InstanceID}] = struct{}{}
	}
	r.version = 1
	r.rebuild()
	r.commit = newCommitter(opts.Store, func(err error) {
		r.log.Error("store write failed: the registry refuses writes until it is restarted", "err", err)
	})
	if replicated {
		var err error
		if r.repl, err = replica.New(memory{r}, es, opts.Replica); err != nil {
			r.commit.close()
			return nil, err
		}
		r.repl.Start()
	}
	return r, nil
}

// Run evicts expired leases every EvictionInterval until Close.
func (r *Registry) Run() {
	r.stopMu.Lock()
	select {
	case <-r.stop:
		r.stopMu.Unlock()
		return
	default:
	}
	r.running.Add(1)
	r.stopMu.Unlock()
	defer r.running.Done()
	t := time.NewTicker(r.opts.EvictionInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.Evict()
			r.repeats.Flush()
		}
	}
}

// endWatches ends every watch stream and long poll.
func (r *Registry) endWatches() { r.endOnce.Do(func() { close(r.watchEnd) }) }

// Close stops eviction (waiting for a run under way), commits the writes
// queued, and closes the store.
func (r *Registry) Close() error {
	r.endWatches()
	r.stopMu.Lock()
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.stopMu.Unlock()
	r.running.Wait()
	if r.repl != nil {
		r.repl.Close()
	}
	r.commit.close()
	r.repeats.FlushAll()
	return r.opts.Store.Close()
}

func (r *Registry) put(in *registryapi.Instance, now time.Time) *lease {
	m := r.apps[in.App]
	if m == nil {
		m = map[string]*lease{}
		r.apps[in.App] = m
	}
	l := &lease{inst: in, duration: time.Duration(in.LeaseInfo.DurationInSecs) * time.Second, static: in.Metadata[registryapi.MetaStatic] == "true"}
	l.lastRenewal.Store(now.UnixMilli())
	m[in.InstanceID] = l
	return l
}

func (r *Registry) lookup(app, id string) *lease {
	return r.apps[strings.ToUpper(app)][id]
}

// record notes a change: version, delta queue, watchers, snapshot. Callers
// hold r.mu.
func (r *Registry) record(action string, in *registryapi.Instance) {
	// Instances are replaced, never changed, once stored: the change can
	// share in; a delta sets its action type on a copy.
	r.appendChange(Change{Action: action, Instance: in})
	r.markDirty(registryapi.InstanceRef{App: in.App, ID: in.InstanceID})
}

// recordLedger tells watchers that the ledger changed. Callers hold r.mu.
func (r *Registry) recordLedger(seq int) {
	r.appendChange(Change{Action: registryapi.ActionLedger, Seq: seq})
}

func (r *Registry) appendChange(c Change) {
	now := r.opts.Now()
	r.version++
	c.Version, c.At = r.version, now
	r.changes = append(r.changes, c)
	cut := 0
	for cut < len(r.changes) && (now.Sub(r.changes[cut].At) > r.opts.DeltaRetention || len(r.changes)-cut > maxChanges) {
		r.dropped = r.changes[cut].Version
		cut++
	}
	r.changes = r.changes[cut:]
	close(r.changed)
	r.changed = make(chan struct{})
}

// maxChanges bounds the delta queue whatever the retention.
const maxChanges = 50_000

// Register adds or replaces an instance, as Eureka's POST /apps/{app}.
func (r *Registry) Register(app string, in *registryapi.Instance) error {
	if in.LeaseInfo.DurationInSecs <= 0 {
		in.LeaseInfo.DurationInSecs = max(int(r.opts.LeaseDuration/time.Second), 1)
	}
	if err := in.Validate(app); err != nil {
		return err
	}
	var again bool
	var o registryapi.Override
	// The slot the shard asks for: a plan writes the one it got into the
	// metadata, which a plan made again must not read as asked.
	asked := in.Metadata[registryapi.MetaSlot]
	err := r.write(func(now time.Time) (*store.Batch, error) {
		ref := registryapi.InstanceRef{App: in.App, ID: in.InstanceID}
		again, o = r.apps[in.App][in.InstanceID] != nil, r.overrides[ref]
		return r.planRegister(in, asked, now)
	})
	if err == nil {
		r.logInstanceFunc(slog.LevelInfo, "instance registered", registryapi.InstanceRef{App: in.App, ID: in.InstanceID}, func() (int, []any) {
			sh := registryapi.ShardOf(in, o)
			args := []any{"address", sh.Address, "status", in.Status, "state", sh.State, "again", again, "lease", logSeconds(in.LeaseInfo.DurationInSecs)}
			if in.App == r.opts.ShardsApp {
				args = append(args, "pool", sh.Pool)
			}
			return sh.Slot, args
		})
	}
	return err
}

// planRegister is the batch that registers in; callers hold r.mu. It
// may run again on the same instance (a replica's write that lost a
// race), so it only sets what it derives.
func (r *Registry) planRegister(in *registryapi.Instance, asked string, now time.Time) (*store.Batch, error) {
	ref := registryapi.InstanceRef{App: in.App, ID: in.InstanceID}
	slot, err := r.assignSlot(ref, in, asked)
	if err != nil {
		return nil, err
	}
	old := r.apps[in.App][in.InstanceID]
	if o, ok := r.overrides[ref]; ok && o.Status != "" {
		in.OverriddenStatus = o.Status
	}
	in.LeaseInfo.RegistrationTimestamp = now.UnixMilli()
	in.LeaseInfo.LastRenewalTimestamp = now.UnixMilli()
	in.LastUpdatedTimestamp = now.UnixMilli()
	if in.LastDirtyTimestamp == 0 {
		in.LastDirtyTimestamp = now.UnixMilli()
	}
	if in.LeaseInfo.ServiceUpTimestamp == 0 && in.Status == registryapi.StatusUp {
		in.LeaseInfo.ServiceUpTimestamp = now.UnixMilli()
	}
	if old != nil && old.inst.LeaseInfo.ServiceUpTimestamp != 0 {
		in.LeaseInfo.ServiceUpTimestamp = old.inst.LeaseInfo.ServiceUpTimestamp
	}
	b := &store.Batch{Put: []*registryapi.Instance{in}}
	if slot != 0 && r.slots[ref] != slot {
		b.Slots = map[registryapi.InstanceRef]int{ref: slot}
	}
	return b, nil
}

// assignSlot picks a shard's slot: the one it asks for when free, else
// the one it had, else the lowest free one; it writes it into the
// instance's metadata, and the caller stores it with the instance.
// Instances of other apps get 0. Callers hold r.mu.
func (r *Registry) assignSlot(ref registryapi.InstanceRef, in *registryapi.Instance, asked string) (int, error) {
	if ref.App != r.opts.ShardsApp {
		return 0, nil
	}
	if err := registryapi.CheckPhysicalTenants(in.Metadata); err != nil {
		return 0, fmt.Errorf("metadata %s: %w", registryapi.MetaPhysicalTenants, err)
	}
	want := 0
	if s := asked; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 31 {
			return 0, fmt.Errorf("metadata slot %q: a shard's slot is a number from 1 to 31", s)
		}
		want = n
	}
	taken := map[int]registryapi.InstanceRef{}
	for other, s := range r.slots {
		if other != ref && other.App == ref.App {
			taken[s] = other
		}
	}
	switch {
	case want != 0:
		if other, ok := taken[want]; ok {
			return 0, fmt.Errorf("%w: slot %d belongs to shard %s; deregister it with --release-slot first, or pick another", registryapi.ErrConflict, want, other.ID)
		}
	case r.slots[ref] != 0:
		want = r.slots[ref]
	default:
		for s := 1; s <= 31; s++ {
			if _, ok := taken[s]; !ok {
				want = s
				break
			}
		}
		if want == 0 {
			return 0, fmt.Errorf("%w: all 31 slots of %s are taken", registryapi.ErrConflict, ref.App)
		}
	}
	if in.Metadata == nil {
		in.Metadata = map[string]string{}
	}
	in.Metadata[registryapi.MetaSlot] = strconv.Itoa(want)
	return want, nil
}

// Renew extends a lease, as Eureka's PUT /apps/{app}/{id}. A client whose
// lastDirtyTimestamp is newer than the registry's copy gets ErrNotFound so
// that it registers again.
func (r *Registry) Renew(app, id string, lastDirty int64) error {
	r.mu.RLock()
	l := r.lookup(app, id)
	var dirty int64
	if l != nil {
		dirty = l.inst.LastDirtyTimestamp // l.inst is replaced under r.mu
	}
	r.mu.RUnlock()
	if l == nil {
		return registryapi.ErrNotFound
	}
	if lastDirty > 0 && lastDirty > dirty {
		return registryapi.ErrNotFound
	}
	now := r.opts.Now()
	l.lastRenewal.Store(now.UnixMilli())
	r.renewals.add(now)
	if r.repl != nil {
		r.repl.Renewed(registryapi.InstanceRef{App: l.inst.App, ID: l.inst.InstanceID}, now.UnixMilli())
	}
	return nil
}

// Cancel removes an instance, as Eureka's DELETE /apps/{app}/{id}.
func (r *Registry) Cancel(app, id string) error {
	app = strings.ToUpper(app)
	slot := 0
	err := r.write(func(time.Time) (*store.Batch, error) {
		if r.apps[app][id] == nil {
			return nil, registryapi.ErrNotFound
		}
		slot = r.slots[registryapi.InstanceRef{App: app, ID: id}]
		return &store.Batch{Delete: []registryapi.InstanceRef{{App: app, ID: id}}}, nil
	})
	if err == nil {
		r.logInstance(slog.LevelInfo, "instance deregistered", registryapi.InstanceRef{App: app, ID: id}, slot, "reason", "cancelled by its client or an operator")
	}
	return err
}

// ReleaseSlot forgets a shard's slot, so that another shard may take it.
func (r *Registry) ReleaseSlot(app, id string) error {
	ref := registryapi.InstanceRef{App: strings.ToUpper(app), ID: id}
	slot := 0
	err := r.write(func(time.Time) (*store.Batch, error) {
		var ok bool
		if slot, ok = r.slots[ref]; !ok {
			return nil, nil
		}
		return &store.Batch{Slots: map[registryapi.InstanceRef]int{ref: 0}}, nil
	})
	if err == nil && slot != 0 {
		r.logInstance(slog.LevelInfo, "slot released", ref, slot)
	}
	return err
}

// SetOverride sets an operator's override (status, draining) on an
// instance; the zero Override removes it.
func (r *Registry) SetOverride(app, id string, o registryapi.Override) error {
	ref := registryapi.InstanceRef{App: strings.ToUpper(app), ID: id}
	var from, to registryapi.Shard
	err := r.write(func(now time.Time) (*store.Batch, error) {
		l := r.apps[ref.App][id]
		if l == nil {
			return nil, registryapi.ErrNotFound
		}
		in := l.inst.Clone()
		in.OverriddenStatus = o.Status
		if in.OverriddenStatus == "" {
			in.OverriddenStatus = registryapi.StatusUnknown
		}
		if r.overrides[ref] == o && l.inst.OverriddenStatus == in.OverriddenStatus {
			return nil, nil
		}
		from, to = registryapi.ShardOf(l.inst, r.overrides[ref]), registryapi.ShardOf(in, o)
		in.LastUpdatedTimestamp = now.UnixMilli()
		// The override and the status it gives the instance are one write.
		return &store.Batch{Put: []*registryapi.Instance{in}, Overrides: map[registryapi.InstanceRef]registryapi.Override{ref: o}}, nil
	})
	if err == nil && to.ID != "" {
		r.logInstance(slog.LevelInfo, "instance state changed", ref, to.Slot, "from", from.State, "to", to.State,
			"overriddenStatus", to.OverriddenStatus, "status", to.Status)
	}
	return err
}

// SetMetadata merges entries into an instance's metadata, as Eureka's PUT
// /apps/{app}/{id}/metadata.
func (r *Registry) SetMetadata(app, id string, kv map[string]string) error {
	app = strings.ToUpper(app)
	slot := 0
	err := r.write(func(now time.Time) (*store.Batch, error) {
		l := r.apps[app][id]
		if l == nil {
			return nil, registryapi.ErrNotFound
		}
		slot = r.slots[registryapi.InstanceRef{App: app, ID: id}]
		in := l.inst.Clone()
		if in.Metadata == nil {
			in.Metadata = map[string]string{}
		}
		for k, v := range kv {
			if k == registryapi.MetaSlot && app == r.opts.ShardsApp {
				return nil, fmt.Errorf("%w: a shard's slot is fixed while it is registered", registryapi.ErrConflict)
			}
			in.Metadata[k] = v
		}
		if app == r.opts.ShardsApp {
			if err := registryapi.CheckPhysicalTenants(in.Metadata); err != nil {
				return nil, fmt.Errorf("metadata %s: %w", registryapi.MetaPhysicalTenants, err)
			}
		}
		in.LastUpdatedTimestamp = now.UnixMilli()
		return &store.Batch{Put: []*registryapi.Instance{in}}, nil
	})
	if err == nil {
		r.logInstance(slog.LevelInfo, "instance metadata changed", registryapi.InstanceRef{App: app, ID: id}, slot, "metadata", kv)
	}
	return err
}

// Override returns the operator's override of an instance.
func (r *Registry) Override(app, id string) registryapi.Override {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.overrides[registryapi.InstanceRef{App: strings.ToUpper(app), ID: id}]
}

// Evict removes expired leases, unless self-preservation holds them.
// Over etcd only the coordinator evicts, and only while it is in touch.
func (r *Registry) Evict() int {
	if !r.checkPreservation() || (r.repl != nil && !r.repl.MayEvict()) {
		return 0
	}
	var gone []evicted
	expiredCount := 0
	err := r.writeAsCoordinator(func(now time.Time) (*store.Batch, error) {
		var expired []registryapi.InstanceRef
		size := 0
		for app, m := range r.apps {
			for id, l := range m {
				size++
				if l.expired(now) {
					expired = append(expired, registryapi.InstanceRef{App: app, ID: id})
				}
			}
		}
		limit := min(len(expired), maxEvictions)
		if r.opts.SelfPreservation {
			// As Eureka: never evict past the share that self-preservation
			// would notice; the rest go in later runs.
			limit = min(limit, size-int(float64(size)*r.opts.RenewalThreshold))
		}
		expiredCount, gone = len(expired), nil
		if limit <= 0 {
			return nil, nil
		}
		rand.Shuffle(len(expired), func(i, j int) { expired[i], expired[j] = expired[j], expired[i] })
		for _, ref := range expired[:limit] {
			l := r.apps[ref.App][ref.ID]
			gone = append(gone, evicted{ref, r.slots[ref], time.UnixMilli(l.lastRenewal.Load()).UTC(), l.duration})
		}
		return &store.Batch{Delete: expired[:limit]}, nil
	})
	if err != nil {
		r.repeats.Log(slog.LevelWarn, "eviction failed", "eviction failed", "err", err)
		return 0
	}
	for _, e := range gone {
		r.logInstance(slog.LevelInfo, "lease expired, instance evicted", e.ref, e.slot, "lastRenewal", e.lastRenewal, "lease", e.lease.String())
	}
	if expiredCount > len(gone) {
		reason := fmt.Sprintf("at most %d a run", maxEvictions)
		if r.opts.SelfPreservation {
			reason += fmt.Sprintf(", and no more than leaves %.0f%% of the instances (self-preservation)", 100*r.opts.RenewalThreshold)
		}
		r.repeats.Log(slog.LevelWarn, "eviction held back", "eviction held back", "expired", expiredCount, "evicted", len(gone), "reason", reason)
	}
	r.evicted.Add(int64(len(gone)))
	return len(gone)
}

// evicted is one instance an eviction run removed, for its log line.
type evicted struct {
	ref         registryapi.InstanceRef
	slot        int
	lastRenewal time.Time
	lease       time.Duration
}

// checkPreservation is LeaseExpirationEnabled for the eviction run,
// which logs self-preservation turning on and off (a registry expecting
// no renewals has nothing to hold: it is not logged as held).
func (r *Registry) checkPreservation() bool {
	enabled, expected, threshold, renewals := r.preservation()
	holding := !enabled && threshold > 0
	if r.preserving.Swap(holding) != holding {
		// Renewals are finite here: +Inf (just started) enables expiry,
		// and holding was false before.
		args := []any{"renewalsLastMinute", math.Round(renewals*10) / 10, "thresholdPerMinute", threshold, "expectedPerMinute", expected}
		// Near the threshold it may turn with every run: one kind both ways.
		if holding {
			r.repeats.Log(slog.LevelWarn, "self-preservation", "self-preservation on: no lease expires while so few renewals arrive", args...)
		} else {
			r.repeats.Log(slog.LevelInfo, "self-preservation", "self-preservation off: expired leases are evicted again", args...)
		}
	}
	return enabled
}

// logInstance writes one line about an instance and its slot (0: none).
// A shard's lines are all written, naming it "shard"; other apps'
// instances may come and go by the thousand (a fleet restarting, a load
// probe), so of those one line of a kind an app is written an interval,
// with the count.
func (r *Registry) logInstance(level slog.Level, msg string, ref registryapi.InstanceRef, slot int, args ...any) {
	r.logInstanceFunc(level, msg, ref, func() (int, []any) { return slot, args })
}

// logInstanceFunc is logInstance with the slot and fields made only if
// the line is written: registration's line, the hot path's, is one of
// thousands that are counted, not written.
func (r *Registry) logInstanceFunc(level slog.Level, msg string, ref registryapi.InstanceRef, fields func() (slot int, args []any)) {
	if ref.App == r.opts.ShardsApp {
		slot, args := fields()
		r.log.Log(context.Background(), level, msg, append([]any{"app", ref.App, "shard", ref.ID, "slot", slot}, args...)...)
		return
	}
	r.repeats.LogFunc(level, msg+"\x00"+ref.App, msg, func() []any {
		_, args := fields()
		return append([]any{"app", ref.App, "instance", ref.ID}, args...)
	})
}

// logSeconds renders a lease in seconds as a duration ("1m30s").
func logSeconds(s int) string { return (time.Duration(s) * time.Second).String() }

// maxEvictions bounds one eviction run (and one etcd transaction).
const maxEvictions = 100

// ExpectedRenewalsPerMinute is what every non-static lease should send;
// it follows registrations, cancellations and evictions at once, since it
// is computed from the instances there are.
func (r *Registry) ExpectedRenewalsPerMinute() float64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var sum float64
	for _, m := range r.apps {
		for _, l := range m {
			if !l.static {
				sum += 60 / float64(max(l.inst.LeaseInfo.RenewalIntervalInSecs, 1))
			}
		}
	}
	return sum
}

// RenewalsLastMinute counts renewals over the last minute; in the first
// minute after a start it extrapolates, so a restart does not look like a
// network partition.
func (r *Registry) RenewalsLastMinute() float64 {
	now := r.opts.Now()
	n := float64(r.renewals.count(now))
	if up := now.Sub(r.started); up < time.Minute {
		if up < max(2*r.opts.EvictionInterval, 10*time.Second) {
			return math.Inf(1)
		}
		n *= float64(time.Minute) / float64(up)
	}
	return n
}

// SelfPreserving says whether eviction is held because too few renewals
// arrive: Eureka's guard against evicting everything in a partition.
func (r *Registry) SelfPreserving() bool { return !r.LeaseExpirationEnabled() }

// LeaseExpirationEnabled is Eureka's isLeaseExpirationEnabled.
func (r *Registry) LeaseExpirationEnabled() bool {
	enabled, _, _, _ := r.preservation()
	return enabled
}

// preservation says whether leases may expire, and the renewals a minute
// that decide it: expected, the threshold, and those that arrived.
func (r *Registry) preservation() (enabled bool, expected, threshold, renewals float64) {
	if !r.opts.SelfPreservation {
		return true, 0, 0, 0
	}
	expected = r.ExpectedRenewalsPerMinute()
	threshold, renewals = expected*r.opts.RenewalThreshold, r.RenewalsLastMinute()
	return leaseExpiration(threshold, renewals), expected, threshold, renewals
}

// leaseExpiration: leases may expire while more renewals arrive than the
// threshold (none expected: nothing to protect, nothing expires).
func leaseExpiration(threshold, renewals float64) bool {
	return threshold > 0 && renewals > threshold
}

// Version is the registry's change counter.
func (r *Registry) Version() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.version
}

// Changed returns a channel closed at the next change.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changed
}

// ChangesSince returns the changes after version since, and false when
// some of them are no longer kept, or since is a version this registry
// never reached (its watcher saw another run of it, before a restart):
// the caller must start over.
func (r *Registry) ChangesSince(since uint64) ([]Change, uint64, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if since < r.dropped || since > r.version {
		return nil, r.version, false
	}
	i := sort.Search(len(r.changes), func(i int) bool { return r.changes[i].Version > since })
	return append([]Change(nil), r.changes[i:]...), r.version, true
}

// Instances returns the instances of one app (all apps when app is ""),
// sorted by app and id.
func (r *Registry) Instances(app string) []*registryapi.Instance {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.instancesLocked(strings.ToUpper(app))
}

func (r *Registry) instancesLocked(app string) []*registryapi.Instance {
	var out []*registryapi.Instance
	for name, m := range r.apps {
		if app != "" && name != app {
			continue
		}
		for _, l := range m {
			in := l.inst.Clone()
			in.LeaseInfo.LastRenewalTimestamp = l.lastRenewal.Load()
			out = append(out, in)
		}
	}
	sortInstances(out)
	return out
}

func sortInstances(ins []*registryapi.Instance) {
	sort.Slice(ins, func(i, j int) bool {
		if ins[i].App != ins[j].App {
			return ins[i].App < ins[j].App
		}
		return ins[i].InstanceID < ins[j].InstanceID
	})
}

// Instance returns one instance.
func (r *Registry) Instance(app, id string) (*registryapi.Instance, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	l := r.lookup(app, id)
	if l == nil {
		return nil, registryapi.ErrNotFound
	}
	in := l.inst.Clone()
	in.LeaseInfo.LastRenewalTimestamp = l.lastRenewal.Load()
	return in, nil
}

// InstanceByID finds an instance by id in any app (GET /instances/{id}).
func (r *Registry) InstanceByID(id string) (*registryapi.Instance, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, m := range r.apps {
		if l := m[id]; l != nil {
			in := l.inst.Clone()
			in.LeaseInfo.LastRenewalTimestamp = l.lastRenewal.Load()
			return in, nil
		}
	}
	return nil, registryapi.ErrNotFound
}

// ByVIP returns the instances whose (secure) VIP address lists vip.
func (r *Registry) ByVIP(vip string, secure bool) []registryapi.Application {
	var apps []registryapi.Application
	for _, a := range registryapi.Group(r.Instances("")) {
		var keep []*registryapi.Instance
		for _, in := range a.Instances {
			addr := in.VIPAddress
			if secure {
				addr = in.SecureVIPAddress
			}
			for _, v := range strings.Split(addr, ",") {
				if strings.EqualFold(strings.TrimSpace(v), vip) {
					keep = append(keep, in)
					break
				}
			}
		}
		if len(keep) > 0 {
			apps = append(apps, registryapi.Application{Name: a.Name, Instances: keep})
		}
	}
	return apps
}

// rateWindow counts events over the last minute in one-second buckets.
type rateWindow struct {
	mu      sync.Mutex
	buckets [60]int64
	secs    [60]int64
}

func (w *rateWindow) add(now time.Time) { w.addN(now, 1) }

func (w *rateWindow) addN(now time.Time, n int64) {
	s := now.Unix()
	i := s % 60
	w.mu.Lock()
	if w.secs[i] != s {
		w.secs[i], w.buckets[i] = s, 0
	}
	w.buckets[i] += n
	w.mu.Unlock()
}

func (w *rateWindow) count(now time.Time) int64 {
	s := now.Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	var n int64
	for i := range w.buckets {
		if s-w.secs[i] < 60 {
			n += w.buckets[i]
		}
	}
	return n
}

// StoreError is why the registry refuses writes since a store write
// failed, or nil.
func (r *Registry) StoreError() error { return r.commit.err() }

// Ready is nil while the registry serves what its store holds: its store
// has not failed, and a replica over etcd is in touch with it.
func (r *Registry) Ready() error {
	if err := r.StoreError(); err != nil {
		return err
	}
	if r.repl != nil {
		return r.repl.Ready()
	}
	return nil
}

// Status reports the registry's own state.
func (r *Registry) Status() registryapi.Health {
	exp := r.ExpectedRenewalsPerMinute()
	renewals := r.RenewalsLastMinute()
	h := registryapi.Health{
		SelfPreservationEnabled:   r.opts.SelfPreservation,
		SelfPreserving:            r.opts.SelfPreservation && !leaseExpiration(exp*r.opts.RenewalThreshold, renewals),
		ExpectedRenewalsPerMinute: exp,
		RenewalThreshold:          exp * r.opts.RenewalThreshold,
		RenewalsLastMinute:        renewals,
		Evicted:                   r.evicted.Load(),
	}
	if math.IsInf(renewals, 1) {
		h.RenewalsLastMinute = exp // just started: nothing to measure yet
	}
	if r.repl != nil {
		h.Replica = r.repl.Status()
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	h.Version, h.Deployments = r.version, len(r.deployments)
	for _, m := range r.apps {
		h.Instances += len(m)
	}
	return h
}

// memory is the registry as its replica sees it (replica.Memory).
type memory struct{ r *Registry }

func (m memory) Lock()          { m.r.mu.Lock() }
func (m memory) Unlock()        { m.r.mu.Unlock() }
func (m memory) Now() time.Time { return m.r.opts.Now() }

func (m memory) ApplyLocked(b *store.Batch, now time.Time) { m.r.applyLocked(b, now) }

func (m memory) SlotsLocked() map[registryapi.InstanceRef]int { return m.r.slots }

// ExtendLeases moves each lease's last renewal forward, never back: a
// digest may arrive after a newer renewal reached this replica directly.
func (m memory) ExtendLeases(renewed map[string]map[string]int64) {
	r := m.r
	n := 0
	r.mu.RLock()
	for app, ids := range renewed {
		for id, at := range ids {
			if l := r.apps[app][id]; l != nil {
				n++
				for {
					cur := l.lastRenewal.Load()
					if cur >= at || l.lastRenewal.CompareAndSwap(cur, at) {
						break
					}
				}
			}
		}
	}
	r.mu.RUnlock()
	r.renewals.addN(r.opts.Now(), int64(n))
}

// EventsSince returns the events of app after since, as one reset when
// they are no longer all kept (or since is 0).
func (r *Registry) EventsSince(app string, since uint64) ([]registryapi.WatchEvent, uint64) {
	changes, version, ok := r.ChangesSince(since)
	if !ok || since == 0 {
		return []registryapi.WatchEvent{{Version: version, Reset: true, Shards: r.Shards(app), Cutovers: r.Cutovers(app)}}, version
	}
	var out []registryapi.WatchEvent
	for _, c := range changes {
		switch c.Action {
		case registryapi.ActionLedger:
			out = append(out, registryapi.WatchEvent{Version: c.Version, Action: c.Action, Ledger: c.Seq})
			continue
		case registryapi.ActionCutover:
			// The record as it is now: a watcher needs the latest, not
			// every write on the way.
			if cut, err := r.Cutover(c.Cutover); err == nil && cut.App == app {
				out = append(out, registryapi.WatchEvent{Version: c.Version, Action: c.Action, Cutover: &cut})
			}
			continue
		}
		if c.Instance.App != app {
			continue
		}
		s := r.shardOfChange(c.Instance)
		out = append(out, registryapi.WatchEvent{Version: c.Version, Action: c.Action, Shard: &s})
	}
	return out, version
}

// ShardsApp is the application whose instances are shards.
func (r *Registry) ShardsApp() string { return r.opts.ShardsApp }

// Replica is this registry's replica over etcd, nil with a local store.
func (r *Registry) Replica() httpfront.Replica {
	if r.repl == nil {
		return nil // not a nil *replica.Replica in a non-nil interface
	}
	return r.repl
}

// WatchesEnd is closed when every watch must end: the server is shutting
// down, and streams that never go idle would hold it.
func (r *Registry) WatchesEnd() <-chan struct{} { return r.watchEnd }
