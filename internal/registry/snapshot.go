package registry

import (
	"bytes"
	"compress/gzip"
	"strconv"
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

// rebuild starts a new snapshot; callers hold r.mu.
func (r *Registry) rebuild() {
	r.snap.Store(&snapshot{
		version: r.version, at: r.opts.Now(), retention: r.opts.DeltaRetention,
		instances: r.instancesLocked(""), changes: r.changes, bodies: map[bodyKind][]byte{},
	})
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
