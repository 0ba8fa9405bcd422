package registry

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"fmt"
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
	apps      []*appChunk // by name, shared with the snapshots before and after
	changes   []Change    // shares the registry's backing array; never written

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
// Rebuilds are at least rebuildGap apart: under a stream of writes and
// reads, a read waits that long at most and one rebuild (and one
// encoding of what changed) serves every read that waited.
const rebuildGap = 5 * time.Millisecond

// view is the registry as the last rebuild left it, by app; it changes
// only under r.rebuildMu.
type view struct {
	apps  map[string]*appView
	names []string // sorted app names
}

type appView struct {
	byID  map[string]viewInstance
	chunk *appChunk // nil: changed since the last rebuild
}

// viewInstance is an instance with its JSON, made when it changed: an
// app's JSON after a change is put together, not encoded again.
type viewInstance struct {
	in   *Instance
	json []byte
}

// appChunk is one app as every snapshot since its last change shows it,
// with its encodings made on first use: a full fetch after a change
// encodes and compresses only the apps that changed.
type appChunk struct {
	app  Application
	json [][]byte // each instance's JSON, in app.Instances' order

	mu   sync.Mutex
	encs map[bodyKind][]byte // xml and gzip vary; delta is always false
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
	case k.gzip:
		plain := k
		plain.gzip = false
		b = gzipped(c.encodingLocked(plain))
	case k.xml:
		b = xmlBytes(toXMLApp(c.app))
	default:
		// As mustJSON(toJSONApp(c.app)) writes it.
		b = fmt.Appendf(nil, `{"name":%s,"instance":[`, mustJSON(c.app.Name))
		for i, j := range c.json {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, j...)
		}
		b = append(b, "]}"...)
	}
	c.encs[k] = b
	return b
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
			a = &appView{byID: map[string]viewInstance{}}
			v.apps[p.ref.App] = a
			namesChanged = true
		}
		if p.inst == nil {
			delete(a.byID, p.ref.ID)
		} else {
			in := p.inst.Clone()
			in.LeaseInfo.LastRenewalTimestamp = p.renewed
			a.byID[p.ref.ID] = viewInstance{in: in, json: mustJSON(toJSON(in))}
		}
		a.chunk = nil
		if len(a.byID) == 0 {
			delete(v.apps, p.ref.App)
			namesChanged = true
		}
	}
	if namesChanged {
		v.names = slices.Sorted(maps.Keys(v.apps))
	}
	var ins []*Instance
	chunks := make([]*appChunk, 0, len(v.names))
	for _, name := range v.names {
		a := v.apps[name]
		if a.chunk == nil {
			sorted := slices.SortedFunc(maps.Values(a.byID), func(x, y viewInstance) int { return strings.Compare(x.in.InstanceID, y.in.InstanceID) })
			c := &appChunk{app: Application{Name: name, Instances: make([]*Instance, len(sorted))}, json: make([][]byte, len(sorted))}
			for i, vi := range sorted {
				c.app.Instances[i], c.json[i] = vi.in, vi.json
			}
			a.chunk = c
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
	// The reads behind this one wait on rebuildMu and find the rebuild
	// done; the writes of the gap go into it.
	time.Sleep(time.Until(r.rebuilt.Add(rebuildGap)))
	r.rebuild()
	r.rebuilt = time.Now()
	return r.snap.Load()
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
		b = gzipped(s.bodyLocked(plain))
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
	version, hash := strconv.FormatUint(s.version, 10), hashcode(s.instances)
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
		head = fmt.Appendf(nil, `{"applications":{"versions__delta":%s,"apps__hashcode":%s,"application":[`, mustJSON(version), mustJSON(hash))
		sep, tail = []byte(","), []byte("]}}")
	}
	if k.gzip {
		head, tail = gzipped(head), gzipped(tail)
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

var gzipComma = gzipped([]byte(","))

// bodyLocked is a delta body, plain; full bodies are fullBody's.
func (s *snapshot) bodyLocked(k bodyKind) []byte {
	if b, ok := s.bodies[k]; ok {
		return b
	}
	apps := s.delta()
	var b []byte
	if k.xml {
		b = encodeAppsXML(apps)
	} else {
		b = encodeAppsJSON(apps)
	}
	s.bodies[k] = b
	return b
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
