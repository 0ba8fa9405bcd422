// Package httpfront is the registry's HTTP front: Eureka's REST API
// under /eureka/apps and /eureka/v2/apps (XML and JSON, as Eureka's own
// clients speak it), shardctl's own under /shardctl/v1 (shards, cutovers,
// the ledger, the watch), the probes and /metrics. It turns requests into
// calls on the registry core, which it sees through the Registry
// interface, and errors into status codes. It imports no store, and
// nothing of probes/, commands/, tui/ or migrate/.
package httpfront

import (
	"bytes"
	"compress/gzip"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// maxInstanceBody bounds a registration: an instance is a few KiB.
const maxInstanceBody = 1 << 20

// Registry is the registry core as its HTTP front sees it
// (*registry.Registry).
type Registry interface {
	Register(app string, in *registryapi.Instance) error
	Renew(app, id string, lastDirty int64) error
	Cancel(app, id string) error
	Instance(app, id string) (*registryapi.Instance, error)
	InstanceByID(id string) (*registryapi.Instance, error)
	Instances(app string) []*registryapi.Instance
	ByVIP(vip string, secure bool) []registryapi.Application
	Override(app, id string) registryapi.Override
	SetOverride(app, id string, o registryapi.Override) error
	SetMetadata(app, id string, kv map[string]string) error
	// Fetch is the encoded answer of a full or delta fetch.
	Fetch(delta, xml, gzip bool) []byte
	Version() uint64
	Changed() <-chan struct{}

	ShardsApp() string
	Shards(app string) []registryapi.Shard
	SetState(app, id, state string) error
	ReleaseSlot(app, id string) error

	Deployments() []ledger.Deployment
	AppendDeployment(d ledger.Deployment) (ledger.Deployment, error)
	SetDeploymentKeys(seq int, shardID string, keys map[string]int64) error

	Cutover(name string) (registryapi.Cutover, error)
	Cutovers(app string) []registryapi.Cutover
	PutCutover(c registryapi.Cutover) (registryapi.Cutover, error)
	LeaseCutover(name, holder string, ttl time.Duration, replace string) (registryapi.Cutover, error)
	ReleaseCutover(name, holder string) error

	EventsSince(app string, since uint64) ([]registryapi.WatchEvent, uint64)
	// WatchesEnd is closed when every watch must end.
	WatchesEnd() <-chan struct{}

	Status() registryapi.Health
	Ready() error
	// Replica is the replica over etcd, nil with a local store.
	Replica() Replica
}

// Replica is a registry replica over etcd as the front sees it
// (*replica.Replica).
type Replica interface {
	// Loaded says whether it has loaded what etcd holds.
	Loaded() bool
	// Staleness is how long ago its view was last known to be etcd's;
	// past Cutoff it answers reads from what it saw, and says so.
	Staleness() time.Duration
	Cutoff() time.Duration
	Status() *registryapi.ReplicaStatus
}

// Options configure the HTTP front.
type Options struct {
	// WriteToken, when set, is required as a bearer token on writes;
	// ReadToken on reads.
	WriteToken, ReadToken string
	Logger                *slog.Logger
	Metrics               *Metrics
	// PollTimeout bounds a watch long-poll (default 30 s).
	PollTimeout time.Duration
	// Heartbeat is the interval of comments on an idle watch stream.
	Heartbeat time.Duration
}

type api struct {
	r    Registry
	opts Options
}

// Handler serves Eureka's REST API under /eureka/apps and /eureka/v2/apps,
// and shardctl's own under /shardctl/v1.
func Handler(r Registry, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = 30 * time.Second
	}
	if opts.Heartbeat <= 0 {
		opts.Heartbeat = 15 * time.Second
	}
	a := &api{r: r, opts: opts}
	mux := http.NewServeMux()
	for _, base := range []string{"/eureka", "/eureka/v2"} {
		a.route(mux, "POST "+base+"/apps/{app}", a.register, true)
		a.route(mux, "GET "+base+"/apps", a.full, false)
		a.route(mux, "GET "+base+"/apps/{$}", a.full, false)
		a.route(mux, "GET "+base+"/apps/delta", a.delta, false)
		a.route(mux, "GET "+base+"/apps/{app}", a.app, false)
		a.route(mux, "GET "+base+"/apps/{app}/{id}", a.instance, false)
		a.route(mux, "PUT "+base+"/apps/{app}/{id}", a.renew, true)
		a.route(mux, "DELETE "+base+"/apps/{app}/{id}", a.cancel, true)
		a.route(mux, "PUT "+base+"/apps/{app}/{id}/status", a.setStatus, true)
		a.route(mux, "DELETE "+base+"/apps/{app}/{id}/status", a.deleteStatus, true)
		a.route(mux, "PUT "+base+"/apps/{app}/{id}/metadata", a.metadata, true)
		a.route(mux, "GET "+base+"/instances/{id}", a.instanceByID, false)
		a.route(mux, "GET "+base+"/vips/{vip}", a.vip(false), false)
		a.route(mux, "GET "+base+"/svips/{vip}", a.vip(true), false)
	}
	a.route(mux, "GET /shardctl/v1/shards", a.shards, false)
	a.route(mux, "GET /shardctl/v1/shards/{id}", a.shard, false)
	a.route(mux, "PUT /shardctl/v1/shards/{id}/state", a.shardState, true)
	a.route(mux, "DELETE /shardctl/v1/shards/{id}", a.deregisterShard, true)
	a.route(mux, "GET /shardctl/v1/watch", a.watch, false)
	a.route(mux, "GET /shardctl/v1/status", a.status, false)
	a.route(mux, "GET /shardctl/v1/ledger", a.ledgerAll, false)
	a.route(mux, "POST /shardctl/v1/ledger", a.ledgerAppend, true)
	a.route(mux, "PUT /shardctl/v1/ledger/{seq}/keys/{shard}", a.ledgerKeys, true)
	a.route(mux, "GET /shardctl/v1/cutovers", a.cutovers, false)
	a.route(mux, "GET /shardctl/v1/cutovers/{name}", a.cutover, false)
	a.route(mux, "PUT /shardctl/v1/cutovers/{name}", a.putCutover, true)
	a.route(mux, "POST /shardctl/v1/cutovers/{name}/lease", a.leaseCutover, true)
	a.route(mux, "DELETE /shardctl/v1/cutovers/{name}/lease", a.releaseCutover, true)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		err := r.Ready()
		p := r.Replica()
		if p == nil {
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		// A replica says why, and what it sees of the others.
		body := struct {
			Ready  bool   `json:"ready"`
			Reason string `json:"reason,omitempty"`
			*registryapi.ReplicaStatus
		}{Ready: err == nil, ReplicaStatus: p.Status()}
		code := http.StatusOK
		if err != nil {
			body.Reason, code = err.Error(), http.StatusServiceUnavailable
		}
		writeJSON(w, code, body)
	})
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics.Handler())
	}
	return mux
}

// route wraps a handler with authorization, panic safety and metrics.
func (a *api) route(mux *http.ServeMux, pattern string, h http.HandlerFunc, write bool) {
	token := a.opts.ReadToken
	if write {
		token = a.opts.WriteToken
	}
	mux.HandleFunc(pattern, func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			if v := recover(); v != nil {
				a.opts.Logger.Error("handler panic", "route", pattern, "panic", v)
				if !rec.wrote {
					http.Error(rec, "internal error", http.StatusInternalServerError)
				}
			}
			if a.opts.Metrics != nil {
				a.opts.Metrics.observe(pattern, rec.code, time.Since(start))
			}
		}()
		if token != "" && !bearer(req, token) {
			rec.Header().Set("WWW-Authenticate", `Bearer realm="shardctl-registry"`)
			http.Error(rec, "missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		if p := a.r.Replica(); p != nil {
			if !p.Loaded() {
				fail(rec, registryapi.ErrNotLoaded)
				return
			}
			// A replica cut off from etcd still answers reads, from what it
			// last saw, and says how old that is.
			if stale := p.Staleness(); !write && stale > p.Cutoff() {
				rec.Header().Set(registryapi.StaleHeader, formatSeconds(stale))
			}
		}
		h(rec, req)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.code, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		s.wrote = true
		f.Flush()
	}
}

func bearer(req *http.Request, token string) bool {
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

func wantsJSON(req *http.Request) bool {
	return strings.Contains(strings.ToLower(req.Header.Get("Accept")), "json")
}

func acceptsGzip(req *http.Request) bool {
	return strings.Contains(strings.ToLower(req.Header.Get("Accept-Encoding")), "gzip")
}

// write sends a body in the format the client asked for, gzipped when it
// accepts that.
func write(w http.ResponseWriter, req *http.Request, jsonBody, xmlBody func() []byte) {
	var b []byte
	if wantsJSON(req) {
		w.Header().Set("Content-Type", "application/json")
		b = jsonBody()
	} else {
		w.Header().Set("Content-Type", "application/xml")
		b = xmlBody()
	}
	if acceptsGzip(req) && len(b) > 1024 {
		w.Header().Set("Content-Encoding", "gzip")
		b = registryapi.Gzip(b)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// readBody reads a bounded body, gunzipping it when the client says so.
func readBody(w http.ResponseWriter, req *http.Request, limit int64) ([]byte, error) {
	body := http.MaxBytesReader(w, req.Body, limit)
	var b []byte
	var err error
	switch n := req.ContentLength; {
	case strings.EqualFold(req.Header.Get("Content-Encoding"), "gzip"):
		zr, zerr := gzip.NewReader(body)
		if zerr != nil {
			return nil, fmt.Errorf("malformed gzip body: %w", zerr)
		}
		b, err = io.ReadAll(io.LimitReader(zr, limit+1))
	case n > 0 && n <= limit:
		// The length is known: one buffer of it, not ReadAll's growing
		// copies; the server ends the body there.
		b = make([]byte, n)
		_, err = io.ReadFull(body, b)
	default:
		b, err = io.ReadAll(body)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, fmt.Errorf("body larger than %d bytes", limit)
		}
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("body larger than %d bytes", limit)
	}
	return b, nil
}

func fail(w http.ResponseWriter, err error) {
	code := http.StatusBadRequest
	switch {
	case errors.Is(err, registryapi.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, registryapi.ErrLeased):
		code = http.StatusLocked
	case errors.Is(err, registryapi.ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, registryapi.ErrUnavailable):
		code = http.StatusServiceUnavailable
	case strings.HasPrefix(err.Error(), "store:"):
		code = http.StatusInternalServerError
	}
	http.Error(w, err.Error(), code)
}

func (a *api) register(w http.ResponseWriter, req *http.Request) {
	b, err := readBody(w, req, maxInstanceBody)
	if err != nil {
		fail(w, err)
		return
	}
	var in *registryapi.Instance
	ct := strings.ToLower(req.Header.Get("Content-Type"))
	trimmed := bytes.TrimSpace(b)
	switch {
	case strings.Contains(ct, "json"), !strings.Contains(ct, "xml") && len(trimmed) > 0 && trimmed[0] == '{':
		in, err = registryapi.DecodeInstanceJSON(b)
	default:
		in, err = registryapi.DecodeInstanceXML(b)
	}
	if err != nil {
		fail(w, err)
		return
	}
	if err := a.r.Register(req.PathValue("app"), in); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) full(w http.ResponseWriter, req *http.Request) {
	a.snapshotBody(w, req, false)
}

func (a *api) delta(w http.ResponseWriter, req *http.Request) {
	a.snapshotBody(w, req, true)
}

// snapshotBody serves the pre-encoded full or delta fetch.
func (a *api) snapshotBody(w http.ResponseWriter, req *http.Request, delta bool) {
	xml, zipped := !wantsJSON(req), acceptsGzip(req)
	if xml {
		w.Header().Set("Content-Type", "application/xml")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	if zipped {
		w.Header().Set("Content-Encoding", "gzip")
	}
	b := a.r.Fetch(delta, xml, zipped)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

func (a *api) app(w http.ResponseWriter, req *http.Request) {
	ins := a.r.Instances(req.PathValue("app"))
	if len(ins) == 0 {
		http.Error(w, "no such application", http.StatusNotFound)
		return
	}
	app := registryapi.Group(ins)[0]
	write(w, req, func() []byte { return registryapi.EncodeAppJSON(app) }, func() []byte { return registryapi.EncodeAppXML(app) })
}

func (a *api) instance(w http.ResponseWriter, req *http.Request) {
	in, err := a.r.Instance(req.PathValue("app"), req.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	write(w, req, func() []byte { return registryapi.EncodeInstanceJSON(in) }, func() []byte { return registryapi.EncodeInstanceXML(in) })
}

func (a *api) instanceByID(w http.ResponseWriter, req *http.Request) {
	in, err := a.r.InstanceByID(req.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	write(w, req, func() []byte { return registryapi.EncodeInstanceJSON(in) }, func() []byte { return registryapi.EncodeInstanceXML(in) })
}

func (a *api) vip(secure bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		apps := a.r.ByVIP(req.PathValue("vip"), secure)
		if len(apps) == 0 {
			http.Error(w, "no instance has this VIP address", http.StatusNotFound)
			return
		}
		var all []*registryapi.Instance
		for _, app := range apps {
			all = append(all, app.Instances...)
		}
		body := &registryapi.Applications{VersionsDelta: strconv.FormatUint(a.r.Version(), 10), AppsHashcode: registryapi.Hashcode(all), Applications: apps}
		write(w, req, func() []byte { return registryapi.EncodeAppsJSON(body) }, func() []byte { return registryapi.EncodeAppsXML(body) })
	}
}

func (a *api) renew(w http.ResponseWriter, req *http.Request) {
	var dirty int64
	if s := req.URL.Query().Get("lastDirtyTimestamp"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			http.Error(w, "lastDirtyTimestamp: expected milliseconds since the epoch", http.StatusBadRequest)
			return
		}
		dirty = n
	}
	if err := a.r.Renew(req.PathValue("app"), req.PathValue("id"), dirty); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *api) cancel(w http.ResponseWriter, req *http.Request) {
	if err := a.r.Cancel(req.PathValue("app"), req.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *api) setStatus(w http.ResponseWriter, req *http.Request) {
	v := req.URL.Query().Get("value")
	if v == "" {
		http.Error(w, "missing value: expected ?value=OUT_OF_SERVICE (or UP, DOWN, STARTING)", http.StatusBadRequest)
		return
	}
	st := registryapi.ParseStatus(v)
	if st == registryapi.StatusUnknown {
		http.Error(w, fmt.Sprintf("value %q: expected UP, DOWN, STARTING or OUT_OF_SERVICE", v), http.StatusBadRequest)
		return
	}
	app, id := req.PathValue("app"), req.PathValue("id")
	o := a.r.Override(app, id)
	o.Status, o.Draining = st, false
	if err := a.r.SetOverride(app, id, o); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *api) deleteStatus(w http.ResponseWriter, req *http.Request) {
	if err := a.r.SetOverride(req.PathValue("app"), req.PathValue("id"), registryapi.Override{}); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (a *api) metadata(w http.ResponseWriter, req *http.Request) {
	kv := map[string]string{}
	for k, vs := range req.URL.Query() {
		if len(vs) > 0 {
			kv[k] = vs[len(vs)-1]
		}
		if err := registryapi.CheckName("metadata key", k); err != nil || !utf8.ValidString(kv[k]) {
			http.Error(w, fmt.Sprintf("metadata %q: keys must be short UTF-8 names, values UTF-8", k), http.StatusBadRequest)
			return
		}
	}
	if len(kv) == 0 {
		http.Error(w, "no metadata: expected ?key=value", http.StatusBadRequest)
		return
	}
	if err := a.r.SetMetadata(req.PathValue("app"), req.PathValue("id"), kv); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// shardctl's own API: JSON only.

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func (a *api) appParam(req *http.Request) string {
	if app := req.URL.Query().Get("app"); app != "" {
		return strings.ToUpper(app)
	}
	return a.r.ShardsApp()
}

func (a *api) shards(w http.ResponseWriter, req *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"app": a.appParam(req), "version": a.r.Version(), "shards": a.r.Shards(a.appParam(req))})
}

func (a *api) shard(w http.ResponseWriter, req *http.Request) {
	in, err := a.r.Instance(a.appParam(req), req.PathValue("id"))
	if err != nil {
		http.Error(w, fmt.Sprintf("no shard %q in %s", req.PathValue("id"), a.appParam(req)), http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, registryapi.ShardOf(in, a.r.Override(in.App, in.InstanceID)))
}

func (a *api) shardState(w http.ResponseWriter, req *http.Request) {
	app, id := a.appParam(req), req.PathValue("id")
	if err := a.r.SetState(app, id, req.URL.Query().Get("value")); err != nil {
		if errors.Is(err, registryapi.ErrNotFound) {
			err = fmt.Errorf("%w: no shard %q in %s", registryapi.ErrNotFound, id, app)
		}
		fail(w, err)
		return
	}
	a.shard(w, req)
}

func (a *api) deregisterShard(w http.ResponseWriter, req *http.Request) {
	app, id := a.appParam(req), req.PathValue("id")
	err := a.r.Cancel(app, id)
	release, _ := strconv.ParseBool(req.URL.Query().Get("release-slot"))
	if errors.Is(err, registryapi.ErrNotFound) && release {
		err = nil // releasing the slot of a shard already gone is the point
	}
	if err != nil {
		if errors.Is(err, registryapi.ErrNotFound) {
			err = fmt.Errorf("%w: no shard %q in %s", registryapi.ErrNotFound, id, app)
		}
		fail(w, err)
		return
	}
	if release {
		if err := a.r.ReleaseSlot(app, id); err != nil {
			fail(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) status(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.r.Status())
}

func (a *api) ledgerAll(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"deployments": a.r.Deployments()})
}

func (a *api) ledgerAppend(w http.ResponseWriter, req *http.Request) {
	b, err := readBody(w, req, registryapi.MaxLedgerBody)
	if err != nil {
		fail(w, err)
		return
	}
	var d ledger.Deployment
	if err := json.Unmarshal(b, &d); err != nil {
		fail(w, fmt.Errorf("malformed deployment JSON: %w", err))
		return
	}
	if len(d.Resources) == 0 {
		fail(w, errors.New("a deployment without resources"))
		return
	}
	d, err = a.r.AppendDeployment(d)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, d)
}

func (a *api) ledgerKeys(w http.ResponseWriter, req *http.Request) {
	seq, err := strconv.Atoi(req.PathValue("seq"))
	if err != nil {
		fail(w, fmt.Errorf("seq %q: expected a number", req.PathValue("seq")))
		return
	}
	b, err := readBody(w, req, maxInstanceBody)
	if err != nil {
		fail(w, err)
		return
	}
	var keys map[string]int64
	if err := json.Unmarshal(b, &keys); err != nil {
		fail(w, fmt.Errorf(`malformed keys JSON, expected {"process@version": key}: %w`, err))
		return
	}
	if err := registryapi.CheckName("shard id", req.PathValue("shard")); err != nil {
		fail(w, err)
		return
	}
	if err := a.r.SetDeploymentKeys(seq, req.PathValue("shard"), keys); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *api) cutovers(w http.ResponseWriter, req *http.Request) {
	app := ""
	if req.URL.Query().Get("app") != "" {
		app = a.appParam(req)
	}
	writeJSON(w, http.StatusOK, map[string]any{"cutovers": a.r.Cutovers(app)})
}

func (a *api) cutover(w http.ResponseWriter, req *http.Request) {
	c, err := a.r.Cutover(req.PathValue("name"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (a *api) putCutover(w http.ResponseWriter, req *http.Request) {
	b, err := readBody(w, req, maxInstanceBody)
	if err != nil {
		fail(w, err)
		return
	}
	var c registryapi.Cutover
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		fail(w, fmt.Errorf("malformed cutover JSON: %w", err))
		return
	}
	if c.Name != "" && c.Name != req.PathValue("name") {
		fail(w, fmt.Errorf("the body names cutover %q, the path %q", c.Name, req.PathValue("name")))
		return
	}
	c.Name = req.PathValue("name")
	if c, err = a.r.PutCutover(c); err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (a *api) leaseCutover(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	ttl, err := time.ParseDuration(q.Get("ttl"))
	if err != nil {
		fail(w, fmt.Errorf("ttl %q: expected a duration such as 15s", q.Get("ttl")))
		return
	}
	c, err := a.r.LeaseCutover(req.PathValue("name"), q.Get("holder"), ttl, q.Get("replace"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (a *api) releaseCutover(w http.ResponseWriter, req *http.Request) {
	if err := a.r.ReleaseCutover(req.PathValue("name"), req.URL.Query().Get("holder")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// formatSeconds is how a duration appears in headers: seconds, to the
// millisecond.
func formatSeconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }
