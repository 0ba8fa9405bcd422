package registry

import (
	"bytes"
	"compress/gzip"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// snapshot is the registry as readers see it at one version. Bodies are
// encoded on the first read that asks for them and kept until the next
// change, so a change is visible to the very next read and a thousand
// readers of one version cost one encoding.
type snapshot struct {
	version   uint64
	at        time.Time
	retention time.Duration
	instances []*Instance
	changes   []Change // shares the registry's backing array; never written

	mu     sync.Mutex
	bodies map[bodyKind][]byte
}

type bodyKind struct{ delta, xml, gzip bool }

// Rebuilding the snapshot. A write marks the instance it changed (O(1)
// under r.mu) and raises the version the snapshot must reach; the first
// read that finds the snapshot behind rebuilds it, and reads at the same
// time share that rebuild. A rebuild copies only the changed instances
// and sorts only their apps: writes with nobody reading cost no rebuild
// at all, and a read never sees a snapshot older than a write it follows.

// view is the registry as the last rebuild left it, by app; it changes
// only under r.rebuildMu.
type view struct {
	apps  map[string]*appView
	names []string // sorted app names
}

type appView struct {
	byID   map[string]*Instance
	sorted []*Instance // nil: to sort again
}

// pending is what one rebuild takes from the registry: the changed
// instances as they are now (nil: gone).
type pending struct {
	ref     InstanceRef
	inst    *Instance
	renewed int64
}

// markDirty notes a changed instance for the next rebuild; callers hold
// r.mu.
func (r *Registry) markDirty(ref InstanceRef) {
	r.dirty[ref] = struct{}{}
	r.wanted.Store(r.version)
}

// rebuild publishes a snapshot with what changed since the last one;
// callers hold r.rebuildMu.
func (r *Registry) rebuild() {
	r.mu.Lock()
	ps := make([]pending, 0, len(r.dirty))
	for ref := range r.dirty {
		p := pending{ref: ref}
		if l := r.apps[ref.App][ref.ID]; l != nil {
			p.inst, p.renewed = l.inst, l.lastRenewal.Load()
		}
		ps = append(ps, p)
	}
	clear(r.dirty)
	version, changes := r.version, r.changes
	r.mu.Unlock()

	v := &r.view
	if v.apps == nil {
		v.apps = map[string]*appView{}
	}
	namesChanged := false
	for _, p := range ps {
		a := v.apps[p.ref.App]
		if a == nil {
			if p.inst == nil {
				continue
			}
			a = &appView{byID: map[string]*Instance{}}
			v.apps[p.ref.App] = a
			namesChanged = true
		}
		if p.inst == nil {
			delete(a.byID, p.ref.ID)
		} else {
			in := p.inst.Clone()
			in.LeaseInfo.LastRenewalTimestamp = p.renewed
			a.byID[p.ref.ID] = in
		}
		a.sorted = nil
		if len(a.byID) == 0 {
			delete(v.apps, p.ref.App)
			namesChanged = true
		}
	}
	if namesChanged {
		v.names = slices.Sorted(maps.Keys(v.apps))
	}
	var ins []*Instance
	for _, name := range v.names {
		a := v.apps[name]
		if a.sorted == nil {
			a.sorted = slices.SortedFunc(maps.Values(a.byID), func(x, y *Instance) int { return strings.Compare(x.InstanceID, y.InstanceID) })
		}
		ins = append(ins, a.sorted...)
	}
	r.snap.Store(&snapshot{
		version: version, at: r.opts.Now(), retention: r.opts.DeltaRetention,
		instances: ins, changes: changes, bodies: map[bodyKind][]byte{},
	})
}

// current is the snapshot for a read: one that holds every write
// acknowledged before the read began.
func (r *Registry) current() *snapshot {
	if s := r.snap.Load(); s.version >= r.wanted.Load() {
		return s
	}
	r.rebuildMu.Lock()
	defer r.rebuildMu.Unlock()
	// Another read may have rebuilt while this one waited.
	if s := r.snap.Load(); s.version >= r.wanted.Load() {
		return s
	}
	r.rebuild()
	return r.snap.Load()
}

func (s *snapshot) body(k bodyKind) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.bodies[k]; ok {
		return b
	}
	var b []byte
	if k.gzip {
		plain := k
		plain.gzip = false
		b = gzipped(s.bodyLocked(plain))
	} else {
		b = s.bodyLocked(k)
	}
	s.bodies[k] = b
	return b
}

func (s *snapshot) bodyLocked(k bodyKind) []byte {
	if b, ok := s.bodies[k]; ok {
		return b
	}
	apps := s.full()
	if k.delta {
		apps = s.delta()
	}
	var b []byte
	if k.xml {
		b = encodeAppsXML(apps)
	} else {
		b = encodeAppsJSON(apps)
	}
	s.bodies[k] = b
	return b
}

func (s *snapshot) full() *Applications {
	return &Applications{VersionsDelta: strconv.FormatUint(s.version, 10), AppsHashcode: hashcode(s.instances), Applications: group(s.instances)}
}

// delta is every instance changed within the retention, at its latest
// change; it carries the full registry's hashcode, which clients compare
// with their copy after applying it.
func (s *snapshot) delta() *Applications {
	latest := map[InstanceRef]*Instance{}
	var order []InstanceRef
	for _, c := range s.changes {
		if c.Instance == nil || s.at.Sub(c.At) > s.retention {
			continue
		}
		ref := InstanceRef{c.Instance.App, c.Instance.InstanceID}
		if _, seen := latest[ref]; !seen {
			order = append(order, ref)
		}
		latest[ref] = c.Instance
	}
	var ins []*Instance
	for _, ref := range order {
		ins = append(ins, latest[ref])
	}
	sortInstances(ins)
	return &Applications{VersionsDelta: strconv.FormatUint(s.version, 10), AppsHashcode: hashcode(s.instances), Applications: group(ins)}
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}
