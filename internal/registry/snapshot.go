package registry

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// snapshot is the registry as readers see it at one version. Bodies are
// encoded on the first read that asks for them and kept until the next
// change, so a change is visible to the very next read and a thousand
// readers of one version cost one encoding.
type snapshot struct {
	version   uint64
	at        time.Time
	retention time.Duration
	instances []*registryapi.Instance
	apps      []*appChunk // by name, shared with the snapshots before and after
	changes   []Change    // shares the registry's backing array; never written

	mu     sync.Mutex
	bodies map[bodyKind][]byte
}

type bodyKind struct{ delta, xml, gzip bool }

// Rebuilding the snapshot. A write marks the instance it changed (O(1)
// under r.mu) and raises the version the snapshot must reach; a read that
// finds the snapshot behind rebuilds it, and reads at the same time share
// that rebuild. A rebuild copies only the changed instances and sorts only
// their apps. A read may be served a snapshot that misses the writes of
// the last Options.ReadStaleness (5 ms), never older ones: under a stream
// of writes and reads, reads do not wait for a rebuild each, and one
// rebuild (and one encoding of what changed) serves every read of the
// next few milliseconds. Writes with nobody reading cost no rebuild.

// view is the registry as the last rebuild left it, by app; it changes
// only under r.rebuildMu.
type view struct {
	apps  map[string]*appView
	names []string // sorted app names
}

type appView struct {
	byID  map[string]viewInstance
	chunk *appChunk
	stale bool // changed since chunk was made
}

// viewInstance is an instance with its JSON, made when it changed: an
// app's JSON after a change is put together, not encoded again.
type viewInstance struct {
	in   *registryapi.Instance
	json []byte
}

// appChunk is one app as every snapshot since its last change shows it,
// with its encodings made on first use: a full fetch after a change
// encodes and compresses only the apps that changed.
type appChunk struct {
	app  registryapi.Application
	segs []*segment // the instances' JSON in runs, in app.Instances' order

	mu   sync.Mutex
	encs map[bodyKind][]byte // xml and gzip vary; delta is always false
}

// A segment is a run of an app's instances (by id), cut where an id's
// hash says: the cuts do not move when an instance comes or goes, so a
// change makes again only the run it falls in, whose JSON and gzip member
// the other runs of the app are put together with. One big app changing
// all the time (the mix's) then costs a few kilobytes of compression per
// change, not the whole app's.
type segment struct {
	json [][]byte

	mu    sync.Mutex
	plain []byte    // the instances' JSON, joined by commas
	gz    [2][]byte // plain as a gzip member; [1] led by a comma
}

// segmentEvery is the mean run length: an id whose hash is 0 modulo it
// starts a run; segmentMax bounds a run whatever the hashes.
const (
	segmentEvery = 32
	segmentMax   = 4 * segmentEvery
)

func startsSegment(id string) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32()%segmentEvery == 0
}

// segments cuts an app's sorted instances into runs, reusing each run of
// old that holds the same instances as they were (same JSON).
func segments(ins []*registryapi.Instance, json [][]byte, old *appChunk) []*segment {
	reuse := map[string]*segment{}
	if old != nil {
		at := 0
		for _, sg := range old.segs {
			reuse[old.app.Instances[at].InstanceID] = sg
			at += len(sg.json)
		}
	}
	var segs []*segment
	start := 0
	for i := 1; i <= len(ins); i++ {
		if i < len(ins) && i-start < segmentMax && !startsSegment(ins[i].InstanceID) {
			continue
		}
		run := json[start:i]
		if sg := reuse[ins[start].InstanceID]; sg != nil && sameJSON(sg.json, run) {
			segs = append(segs, sg)
		} else {
			segs = append(segs, &segment{json: run})
		}
		start = i
	}
	return segs
}

// sameJSON says whether two runs hold the same encodings (not equal
// bytes: the same ones, made once per change of an instance).
func sameJSON(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) || len(a[i]) > 0 && &a[i][0] != &b[i][0] {
			return false
		}
	}
	return true
}

// encoding is the run's JSON, or, when gz, a gzip member of it led by a
// comma unless it is the app's first (a member cannot take one after).
func (sg *segment) encoding(gz, first bool) []byte {
	sg.mu.Lock()
	defer sg.mu.Unlock()
	if sg.plain == nil {
		n := len(sg.json)
		for _, j := range sg.json {
			n += len(j)
		}
		sg.plain = make([]byte, 0, n)
		for i, j := range sg.json {
			if i > 0 {
				sg.plain = append(sg.plain, ',')
			}
			sg.plain = append(sg.plain, j...)
		}
	}
	if !gz {
		return sg.plain
	}
	lead := 1
	if first {
		lead = 0
	}
	if sg.gz[lead] == nil {
		if first {
			sg.gz[lead] = registryapi.Gzip(sg.plain)
		} else {
			sg.gz[lead] = registryapi.Gzip(append([]byte{','}, sg.plain...))
		}
	}
	return sg.gz[lead]
}

// encoding is the app's element of a full fetch, compressed as its own
// gzip member when k.gzip (a body of concatenated members is one valid
// gzip stream, RFC 1952 §2.2).
func (c *appChunk) encoding(k bodyKind) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.encodingLocked(k)
}

func (c *appChunk) encodingLocked(k bodyKind) []byte {
	if b, ok := c.encs[k]; ok {
		return b
	}
	if c.encs == nil {
		c.encs = map[bodyKind][]byte{}
	}
	var b []byte
	switch {
	case k.xml && k.gzip:
		plain := k
		plain.gzip = false
		b = registryapi.Gzip(c.encodingLocked(plain))
	case k.xml:
		b = registryapi.AppXML(c.app)
	default:
		// As registryapi.EncodeAppJSON writes it, from its runs.
		head, tail := fmt.Appendf(nil, `{"name":%s,"instance":[`, registryapi.MustJSON(c.app.Name)), []byte("]}")
		if k.gzip {
			head, tail = registryapi.Gzip(head), gzipTail
		}
		b = append(b, head...)
		for i, sg := range c.segs {
			if i > 0 && !k.gzip {
				b = append(b, ',')
			}
			b = append(b, sg.encoding(k.gzip, i == 0)...)
		}
		b = append(b, tail...)
	}
	c.encs[k] = b
	return b
}

var gzipTail = registryapi.Gzip([]byte("]}"))

// pending is what one rebuild takes from the registry: the changed
// instances as they are now (nil: gone).
type pending struct {
	ref     registryapi.InstanceRef
	inst    *registryapi.Instance
	renewed int64
}

// markDirty notes a changed instance for the next rebuild; callers hold
// r.mu.
func (r *Registry) markDirty(ref registryapi.InstanceRef) {
	if len(r.dirty) == 0 {
		r.dirtySince.Store(time.Now().UnixNano())
	}
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
	r.dirtySince.Store(0)
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
			a = &appView{byID: map[string]viewInstance{}}
			v.apps[p.ref.App] = a
			namesChanged = true
		}
		if p.inst == nil {
			delete(a.byID, p.ref.ID)
		} else {
			in := p.inst.Clone()
			in.LeaseInfo.LastRenewalTimestamp = p.renewed
			a.byID[p.ref.ID] = viewInstance{in: in, json: registryapi.InstanceJSON(in)}
		}
		a.stale = true
		if len(a.byID) == 0 {
			delete(v.apps, p.ref.App)
			namesChanged = true
		}
	}
	if namesChanged {
		v.names = slices.Sorted(maps.Keys(v.apps))
	}
	var ins []*registryapi.Instance
	chunks := make([]*appChunk, 0, len(v.names))
	for _, name := range v.names {
		a := v.apps[name]
		if a.chunk == nil || a.stale {
			sorted := slices.SortedFunc(maps.Values(a.byID), func(x, y viewInstance) int { return strings.Compare(x.in.InstanceID, y.in.InstanceID) })
			c := &appChunk{app: registryapi.Application{Name: name, Instances: make([]*registryapi.Instance, len(sorted))}}
			json := make([][]byte, len(sorted))
			for i, vi := range sorted {
				c.app.Instances[i], json[i] = vi.in, vi.json
			}
			c.segs = segments(c.app.Instances, json, a.chunk)
			a.chunk, a.stale = c, false
		}
		chunks = append(chunks, a.chunk)
		ins = append(ins, a.chunk.app.Instances...)
	}
	r.snap.Store(&snapshot{
		version: version, at: r.opts.Now(), retention: r.opts.DeltaRetention,
		instances: ins, apps: chunks, changes: changes, bodies: map[bodyKind][]byte{},
	})
}

// current is the snapshot for a read: one that holds every write
// acknowledged before the read began, but those of the last
// ReadStaleness.
func (r *Registry) current() *snapshot {
	if s := r.snap.Load(); r.fresh(s) {
		return s
	}
	r.rebuildMu.Lock()
	defer r.rebuildMu.Unlock()
	// Another read may have rebuilt while this one waited.
	if s := r.snap.Load(); r.fresh(s) {
		return s
	}
	r.rebuild()
	return r.snap.Load()
}

// fresh says whether a snapshot may serve a read now: it holds every
// write, or misses only writes younger than the staleness allowed.
func (r *Registry) fresh(s *snapshot) bool {
	if s.version >= r.wanted.Load() {
		return true
	}
	since := r.dirtySince.Load()
	return since != 0 && time.Since(time.Unix(0, since)) < r.opts.ReadStaleness
}

// Fetch is the encoded answer of a full fetch (delta false) or a delta
// fetch, in XML or JSON, gzipped or not, as of a snapshot fresh enough
// for a read: encoded once per snapshot and kind, whoever asks.
func (r *Registry) Fetch(delta, xml, gzip bool) []byte {
	return r.current().body(bodyKind{delta: delta, xml: xml, gzip: gzip})
}

func (s *snapshot) body(k bodyKind) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.bodies[k]; ok {
		return b
	}
	var b []byte
	switch {
	case !k.delta:
		b = s.fullBody(k)
	case k.gzip:
		plain := k
		plain.gzip = false
		b = registryapi.Gzip(s.bodyLocked(plain))
	default:
		b = s.bodyLocked(k)
	}
	s.bodies[k] = b
	return b
}

// fullBody is a full fetch put together from the apps' encodings, which
// only changed apps make again; as encodeAppsJSON and encodeAppsXML
// would write it.
func (s *snapshot) fullBody(k bodyKind) []byte {
	version, hash := strconv.FormatUint(s.version, 10), registryapi.Hashcode(s.instances)
	var head, sep, tail []byte
	if k.xml {
		var esc bytes.Buffer
		esc.WriteString(xml.Header[:len(xml.Header)-1] + "<applications><versions__delta>")
		_ = xml.EscapeText(&esc, []byte(version))
		esc.WriteString("</versions__delta><apps__hashcode>")
		_ = xml.EscapeText(&esc, []byte(hash))
		esc.WriteString("</apps__hashcode>")
		head, tail = esc.Bytes(), []byte("</applications>")
	} else {
		head = fmt.Appendf(nil, `{"applications":{"versions__delta":%s,"apps__hashcode":%s,"application":[`, registryapi.MustJSON(version), registryapi.MustJSON(hash))
		sep, tail = []byte(","), []byte("]}}")
	}
	if k.gzip {
		head, tail = registryapi.Gzip(head), registryapi.Gzip(tail)
		if sep != nil {
			sep = gzipComma
		}
	}
	n := len(head) + len(tail)
	for _, a := range s.apps {
		n += len(a.encoding(k)) + len(sep)
	}
	b := make([]byte, 0, n)
	b = append(b, head...)
	for i, a := range s.apps {
		if i > 0 {
			b = append(b, sep...)
		}
		b = append(b, a.encoding(k)...)
	}
	return append(b, tail...)
}

var gzipComma = registryapi.Gzip([]byte(","))

// bodyLocked is a delta body, plain; full bodies are fullBody's.
func (s *snapshot) bodyLocked(k bodyKind) []byte {
	if b, ok := s.bodies[k]; ok {
		return b
	}
	apps := s.delta()
	var b []byte
	if k.xml {
		b = registryapi.EncodeAppsXML(apps)
	} else {
		b = registryapi.EncodeAppsJSON(apps)
	}
	s.bodies[k] = b
	return b
}

// delta is every instance changed within the retention, at its latest
// change; it carries the full registry's hashcode, which clients compare
// with their copy after applying it.
func (s *snapshot) delta() *registryapi.Applications {
	latest := map[registryapi.InstanceRef]Change{}
	for _, c := range s.changes {
		if c.Instance != nil && s.at.Sub(c.At) <= s.retention {
			latest[registryapi.InstanceRef{App: c.Instance.App, ID: c.Instance.InstanceID}] = c
		}
	}
	ins := make([]*registryapi.Instance, 0, len(latest))
	for _, c := range latest {
		// A copy: the stored instance is shared with the full snapshot.
		in := *c.Instance
		in.ActionType = c.Action
		ins = append(ins, &in)
	}
	sortInstances(ins)
	return &registryapi.Applications{VersionsDelta: strconv.FormatUint(s.version, 10), AppsHashcode: registryapi.Hashcode(s.instances), Applications: registryapi.Group(ins)}
}
