package registry

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/registry/httpfront"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryapi/wiretest"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// Native fuzz tests of the wire decoders and of the whole HTTP API. `go
// test` runs every target over its seed corpus (the f.Add calls below and
// testdata/fuzz/FuzzX/*), so the seeds are regression tests too; to look
// for new inputs:
//
//	go test -run '^$' -fuzz '^FuzzHandler$' -fuzztime 60s -fuzzminimizetime 200x ./internal/registry/
//
// (-fuzzminimizetime: by default every new interesting input is minimized
// for up to 60 s, which stalls a short run.)

// The HTTP API.

var fzNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fzRoute is one request template; {base} is /eureka or /eureka/v2, {app}
// and {id} the fuzzed segments, escaped.
type fzRoute struct {
	method, path string
	body         bool
	name         string
}

var fzRoutes = []fzRoute{
	{"POST", "{base}/apps/{app}", true, "register"},
	{"GET", "{base}/apps", false, "full"},
	{"GET", "{base}/apps/delta", false, "delta"},
	{"GET", "{base}/apps/{app}", false, "app"},
	{"GET", "{base}/apps/{app}/{id}", false, "instance"},
	{"PUT", "{base}/apps/{app}/{id}", false, "renew"},
	{"DELETE", "{base}/apps/{app}/{id}", false, "cancel"},
	{"PUT", "{base}/apps/{app}/{id}/status", false, "setStatus"},
	{"DELETE", "{base}/apps/{app}/{id}/status", false, "deleteStatus"},
	{"PUT", "{base}/apps/{app}/{id}/metadata", false, "metadata"},
	{"GET", "{base}/instances/{id}", false, "instanceByID"},
	{"GET", "{base}/vips/{app}", false, "vip"},
	{"GET", "{base}/svips/{app}", false, "svip"},
	{"GET", "/shardctl/v1/shards", false, "shards"},
	{"GET", "/shardctl/v1/shards/{id}", false, "shard"},
	{"PUT", "/shardctl/v1/shards/{id}/state", false, "shardState"},
	{"DELETE", "/shardctl/v1/shards/{id}", false, "deregisterShard"},
	{"GET", "/shardctl/v1/watch", false, "watch"},
	{"GET", "/shardctl/v1/status", false, "status"},
	{"GET", "/shardctl/v1/ledger", false, "ledger"},
	{"POST", "/shardctl/v1/ledger", true, "ledgerAppend"},
	{"PUT", "/shardctl/v1/ledger/{id}/keys/{app}", true, "ledgerKeys"},
	{"GET", "/metrics", false, "metrics"},
	{"GET", "/healthz", false, "healthz"},
	{"", "/{raw}", true, "raw"}, // app is the whole path, unescaped
}

// Op codes of the seeds.
const (
	fzRegister = iota
	fzFull
	fzDelta
	fzApp
	fzInstance
	fzRenew
	fzCancel
	fzSetStatus
	fzDeleteStatus
	fzMetadata
	fzInstanceByID
	fzVIP
	fzSVIP
	fzShards
	fzShard
	fzShardState
	fzDeregisterShard
	fzWatch
	fzStatus
	fzLedger
	fzLedgerAppend
	fzLedgerKeys
	fzMetrics
	fzHealthz
	fzRaw
)

// A step is three bytes: route (fzRoutes), method (n%11 < 4: the route's;
// else fzMethods[n%11%7]) and headers:
//
//	bits 0-1  Accept: none (XML), JSON, XML, both
//	bit  2    Accept-Encoding: gzip
//	bits 3-4  Content-Type: none, JSON, XML, text/plain
//	bits 5-6  Content-Encoding: none, gzip, gzip on a plain body, truncated gzip
//	bit  7    /eureka/v2 rather than /eureka
var fzMethods = []string{"GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"}

const (
	hJSON     = 1
	hXML      = 2
	hBoth     = 3
	hGzip     = 1 << 2
	hCTJSON   = 1 << 3
	hCTXML    = 2 << 3
	hCTText   = 3 << 3
	hCEGzip   = 1 << 5
	hCEPlain  = 2 << 5
	hCETrunc  = 3 << 5
	hV2       = 1 << 7
	fzMaxStep = 4
)

func fzStep(route, method, hdr byte) []byte { return []byte{route, method, hdr} }

func fzSteps(s ...[]byte) []byte { return bytes.Join(s, nil) }

// FuzzHandler drives the real handler, no network, with up to four
// requests on one fresh registry: after each, nothing answered 5xx and the
// registry still reads back consistently, in JSON and XML, full and delta.
func FuzzHandler(f *testing.F) {
	type seed struct {
		steps          []byte
		app, id, query string
		body           string
		bolt           bool
	}
	var seeds []seed
	for i, b := range wiretest.InstanceJSONSeeds {
		in, _ := registryapi.DecodeInstanceJSON([]byte(b))
		app, id := "ORDERS", "orders-1"
		if in != nil {
			app, id = in.App, cmp.Or(in.InstanceID, in.HostName)
		}
		hdr := byte(hJSON | hCTJSON)
		if i%3 == 1 {
			hdr = hJSON | hCTJSON | hCEGzip | hGzip | hV2
		}
		seeds = append(seeds, seed{steps: fzSteps(fzStep(fzRegister, 0, hdr), fzStep(fzInstance, 0, hdr), fzStep(fzDelta, 0, hXML)), app: app, id: id, body: b, bolt: i%4 == 0})
	}
	for i, b := range wiretest.InstanceXMLSeeds {
		in, _ := registryapi.DecodeInstanceXML([]byte(b))
		app, id := "ORDERS", "orders-1"
		if in != nil {
			app, id = in.App, cmp.Or(in.InstanceID, in.HostName)
		}
		hdr := byte(hCTXML | hV2)
		if i%2 == 1 {
			hdr = hXML | hCEGzip
		}
		seeds = append(seeds, seed{steps: fzSteps(fzStep(fzRegister, 0, hdr), fzStep(fzApp, 0, hXML), fzStep(fzFull, 0, hGzip)), app: app, id: id, body: b, bolt: i%4 == 1})
	}
	java := wiretest.InstanceJSONSeeds[0]
	fargoRead := wiretest.InstanceJSONSeeds[5]
	seeds = append(seeds,
		// Eureka's life cycle on the preloaded instances.
		seed{steps: fzSteps(fzStep(fzRenew, 0, 0), fzStep(fzSetStatus, 0, 0), fzStep(fzDeleteStatus, 0, hV2)), app: "orders", id: "orders-1", query: "status=UP&lastDirtyTimestamp=1700000000000&value=OUT_OF_SERVICE"},
		seed{steps: fzSteps(fzStep(fzMetadata, 0, 0), fzStep(fzInstance, 0, hJSON), fzStep(fzCancel, 0, 0), fzStep(fzRenew, 0, 0)), app: "ORDERS", id: "orders-2", query: "zone=b&weight=10&@class=x&a+b=%FF", bolt: true},
		seed{steps: fzSteps(fzStep(fzRenew, 0, hV2), fzStep(fzRenew, 0, 0)), app: "ORDERS", id: "orders-1", query: "lastDirtyTimestamp=99999999999999&overriddenstatus=DOWN"},
		seed{steps: fzSteps(fzStep(fzVIP, 0, hJSON|hGzip), fzStep(fzSVIP, 0, 0), fzStep(fzInstanceByID, 0, hJSON)), app: "orders", id: "pay-1"},
		seed{steps: fzSteps(fzStep(fzSetStatus, 0, 0)), app: "PAYMENTS", id: "pay-1", query: "value=bogus"},
		seed{steps: fzSteps(fzStep(fzDeleteStatus, 0, 0), fzStep(fzApp, 0, hJSON)), app: "PAYMENTS", id: "pay-1", query: "value=UP"},
		// A client re-registering with an override it read back, then the
		// operator removing every override.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON), fzStep(fzDeleteStatus, 0, 0), fzStep(fzInstance, 0, hJSON)), app: "ORDERS", id: "orders-1", body: fargoRead},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTXML), fzStep(fzDeleteStatus, 0, 0)), app: "ORDERS", id: "orders-1", body: wiretest.InstanceXMLSeeds[4], bolt: true},
		// shardctl's API.
		seed{steps: fzSteps(fzStep(fzShards, 0, 0), fzStep(fzShard, 0, 0), fzStep(fzShardState, 0, 0), fzStep(fzShards, 0, 0)), id: "shard-a", query: "app=zeebe-shards&value=DRAINING"},
		seed{steps: fzSteps(fzStep(fzShardState, 0, 0), fzStep(fzDeregisterShard, 0, 0), fzStep(fzRegister, 0, hCTJSON)), app: "ZEEBE-SHARDS", id: "shard-b", query: "value=UP&release-slot=true", body: wiretest.InstanceJSONSeeds[2]},
		seed{steps: fzSteps(fzStep(fzDeregisterShard, 0, 0), fzStep(fzShards, 0, 0)), id: "shard-a", query: "release-slot=1", bolt: true},
		seed{steps: fzSteps(fzStep(fzWatch, 0, 0), fzStep(fzShardState, 0, 0), fzStep(fzWatch, 0, 0)), id: "shard-b", query: "poll=1&since=2&timeout=0s&value=OUT_OF_SERVICE"},
		seed{steps: fzSteps(fzStep(fzWatch, 0, 0)), query: "app=ORDERS&since=1"},
		seed{steps: fzSteps(fzStep(fzStatus, 0, 0), fzStep(fzMetrics, 0, 0), fzStep(fzHealthz, 0, 0))},
		seed{steps: fzSteps(fzStep(fzLedgerAppend, 0, 0), fzStep(fzLedger, 0, 0)), body: `{"resources":[{"name":"pay.bpmn","content":"PGRlZmluaXRpb25zLz4="}],"processes":[{"bpmnProcessId":"pay","version":1,"keys":null}],"messageStarts":["go"]}`, bolt: true},
		seed{steps: fzSteps(fzStep(fzLedgerKeys, 0, 0), fzStep(fzLedger, 0, hJSON)), app: "shard-a", id: "1", body: `{"order@1":2251799813685249,"other@2":1}`},
		seed{steps: fzSteps(fzStep(fzLedgerKeys, 0, hCEGzip)), app: "shard-a", id: "7", body: `{"order@1":"x"}`},
		seed{steps: fzSteps(fzStep(fzLedgerAppend, 0, 0)), body: `{"resources":[]}`},
		// Broken requests.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON|hCEPlain)), app: "ORDERS", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON|hCETrunc)), app: "ORDERS", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTText)), app: "orders", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTXML)), app: "ORDERS", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON)), app: "PAYMENTS", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 5, 0), fzStep(fzCancel, 4, 0), fzStep(fzFull, 7, 0), fzStep(fzStatus, 8, 0)), app: "ORDERS", id: "orders-1", body: java},
		seed{steps: fzSteps(fzStep(fzRaw, 4, hJSON)), app: "eureka/apps/../v2/apps/ORDERS/orders-1", query: "a=b"},
		seed{steps: fzSteps(fzStep(fzRaw, 9, 0)), app: "eureka/apps/ORDERS/orders-1/status", query: "value=DOWN"},
		seed{steps: fzSteps(fzStep(fzInstance, 0, hJSON), fzStep(fzCancel, 0, 0)), app: "ORDERS", id: "a/b"},
		seed{steps: fzSteps(fzStep(fzRenew, 0, 0)), app: "ORDERS", id: "orders-1", query: "lastDirtyTimestamp=soon"},
		seed{steps: fzSteps(fzStep(fzWatch, 0, 0)), query: "since=x"},
		seed{steps: fzSteps(fzStep(fzWatch, 0, 0)), query: "poll=1&timeout=-1s"},
		// Regressions: registry bugs this target found.
		//
		// A lease of 10^10 s overflowed time.Duration in Registry.put: the
		// registration answered 204 and the next eviction removed it.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON)), app: "ORDERS", body: `{"instance":{"instanceId":"long-lease","app":"ORDERS","ipAddr":"10.0.0.9","dataCenterInfo":{"name":"MyOwn"},"leaseInfo":{"renewalIntervalInSecs":30,"durationInSecs":10000000000}}}`},
		// A lease of 3*10^11 s ended after year 9999: every shardctl JSON
		// answer naming the instance was 200 with an empty body.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON)), app: "ORDERS", body: `{"instance":{"instanceId":"longer-lease","app":"ORDERS","ipAddr":"10.0.0.9","dataCenterInfo":{"name":"MyOwn"},"leaseInfo":{"renewalIntervalInSecs":30,"durationInSecs":300000000000}}}`},
		// On bolt, an instance id over bbolt's 32 KiB key limit answered 500.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON)), app: "ORDERS", bolt: true, body: `{"instance":{"instanceId":"` + strings.Repeat("i", 40000) + `","app":"ORDERS","ipAddr":"10.0.0.9","dataCenterInfo":{"name":"MyOwn"}}}`},
		// On bolt, an app name holding NUL split wrongly on reload: the
		// override came back on another instance.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON), fzStep(fzSetStatus, 0, 0)), app: "A\x00B", id: "i", query: "value=OUT_OF_SERVICE", bolt: true, body: `{"instance":{"instanceId":"i","app":"A\u0000B","ipAddr":"10.0.0.9","dataCenterInfo":{"name":"MyOwn"}}}`},
	)
	for _, s := range seeds {
		f.Add(s.steps, s.app, s.id, s.query, []byte(s.body), s.bolt)
	}
	f.Fuzz(fzHandlerInput)
}

// fzHandlerInput runs one input of FuzzHandler.
func fzHandlerInput(t *testing.T, steps []byte, app, id, query string, body []byte, bolt bool) {
	if len(body) > 64<<10 || len(app)+len(id)+len(query) > 4<<10 {
		return // an instance is a few KiB; keep each input quick
	}
	defer wiretest.Watchdog(t)()
	h := fzNewHarness(t, steps, bolt)
	defer h.close()
	checked := uint64(0)
	for i := 0; i+3 <= len(steps) && i/3 < fzMaxStep; i += 3 {
		h.step(steps[i], steps[i+1], steps[i+2], app, id, query, body)
		if v := h.r.Version(); v != checked { // nothing to check when nothing changed
			h.checkConsistent()
			checked = v
		}
	}
	if checked == 0 {
		h.checkConsistent()
	}
	h.checkEnd()
}

// fzHarness is one fresh registry, its handler, and a Eureka client's copy
// of the registry kept up to date by deltas.
type fzHarness struct {
	t     *testing.T
	r     *Registry
	h     http.Handler
	bolt  string // the store's path, when bolt
	copy  map[registryapi.InstanceRef]*registryapi.Instance
	trace []string
}

func fzNewHarness(t *testing.T, steps []byte, bolt bool) *fzHarness {
	h := &fzHarness{t: t}
	opts := Options{Now: func() time.Time { return fzNow }, ReadStaleness: -1}
	if bolt {
		dir := "/dev/shm" // bbolt fsyncs every write: keep it in memory
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			dir = ""
		}
		d, err := os.MkdirTemp(dir, "fuzz-registry-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		h.bolt = filepath.Join(d, "registry.db")
		st, err := store.OpenBoltStore(h.bolt)
		if err != nil {
			t.Fatal(err)
		}
		opts.Store = st
	}
	r, err := NewRegistry(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	var ho httpfront.Options
	for i := 0; i+3 <= len(steps) && i/3 < fzMaxStep; i += 3 {
		if int(steps[i])%len(fzRoutes) == fzMetrics {
			ho.Metrics = httpfront.NewMetrics(r) // only when scraped: it costs
		}
	}
	h.h = httpfront.Handler(r, ho)
	h.preload()
	h.copy = map[registryapi.InstanceRef]*registryapi.Instance{}
	full := h.fetchApps(false, false)
	for _, a := range full.Applications {
		for _, in := range a.Instances {
			h.copy[registryapi.InstanceRef{App: in.App, ID: in.InstanceID}] = in
		}
	}
	return h
}

func (h *fzHarness) close() {
	if h.r != nil {
		_ = h.r.Close()
	}
}

// preload registers what the seeds name: two apps, two shards, overrides
// and one deployment.
func (h *fzHarness) preload() {
	t := h.t
	mk := func(app, id string, st registryapi.Status, port int, md map[string]string) *registryapi.Instance {
		return &registryapi.Instance{
			InstanceID: id, App: app, HostName: id + ".local", IPAddr: "10.0.0." + strconv.Itoa(port%200), Status: st,
			Port: port, PortEnabled: true, SecurePort: 443, VIPAddress: strings.ToLower(app), SecureVIPAddress: strings.ToLower(app) + "-secure",
			DataCenterInfo: registryapi.DataCenterInfo{Class: "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", Name: "MyOwn"},
			LeaseInfo:      registryapi.LeaseInfo{RenewalIntervalInSecs: 10, DurationInSecs: 30},
			Metadata:       md,
		}
	}
	for _, in := range []*registryapi.Instance{
		mk("ORDERS", "orders-1", registryapi.StatusUp, 8080, map[string]string{"zone": "a"}),
		mk("ORDERS", "orders-2", registryapi.StatusDown, 8081, nil),
		mk("PAYMENTS", "pay-1", registryapi.StatusStarting, 8090, map[string]string{"management.port": "8091"}),
		mk("ZEEBE-SHARDS", "shard-a", registryapi.StatusUp, 26500, map[string]string{registryapi.MetaSlot: "1", registryapi.MetaPool: "p1"}),
		mk("ZEEBE-SHARDS", "shard-b", registryapi.StatusUp, 26501, map[string]string{registryapi.MetaPool: "p2"}),
	} {
		if err := h.r.Register(in.App, in); err != nil {
			t.Fatalf("preload %s/%s: %v", in.App, in.InstanceID, err)
		}
	}
	if err := h.r.SetOverride("PAYMENTS", "pay-1", registryapi.Override{Status: registryapi.StatusOutOfService}); err != nil {
		t.Fatal(err)
	}
	if err := h.r.SetState("ZEEBE-SHARDS", "shard-b", registryapi.StateDraining); err != nil {
		t.Fatal(err)
	}
	d := ledger.Deployment{
		Resources: []ledger.Resource{{Name: "order.bpmn", Content: []byte("<definitions/>")}},
		Processes: []ledger.ProcessID{{BpmnProcessID: "order", Version: 1, Keys: map[string]int64{"shard-a": 2251799813685249}}},
	}
	if _, err := h.r.AppendDeployment(d); err != nil {
		t.Fatal(err)
	}
}

// fzSeg escapes one path segment; "" stays "" (the mux then sees //).
func fzSeg(s string) string { return url.PathEscape(s) }

// fzQuery keeps what an HTTP server would let through in a request line.
func fzQuery(q string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x21 || r == 0x7f || r == '#' || r == utf8.RuneError {
			return -1
		}
		return r
	}, q)
}

type fzResponse struct {
	code   int
	header http.Header
	body   []byte // gunzipped
}

// serve sends one request and checks what every answer must be: no 5xx,
// and a 2xx body that is the JSON or XML it says it is.
func (h *fzHarness) serve(method, target, rawPath, query string, hdr http.Header, body []byte, watch bool) fzResponse {
	return h.serveChecked(method, target, rawPath, query, hdr, body, watch, true)
}

// serveChecked is serve; check false leaves the body to the caller, which
// parses it anyway.
func (h *fzHarness) serveChecked(method, target, rawPath, query string, hdr http.Header, body []byte, watch, check bool) fzResponse {
	t := h.t
	t.Helper()
	ctx := context.Background()
	if watch {
		// A watch lasts as long as its client: this one has gone, so the
		// stream and the long poll end at once.
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://registry.test/", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if rawPath != "" {
		req.URL.Path = rawPath
	} else {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatalf("parse %q: %v", target, err)
		}
		req.URL.Path, req.URL.RawPath = u.Path, u.RawPath
	}
	req.URL.RawQuery = query
	req.RequestURI = req.URL.RequestURI()
	maps.Copy(req.Header, hdr)
	rec := httptest.NewRecorder()
	start := time.Now()
	h.h.ServeHTTP(rec, req)
	took := time.Since(start)
	desc := fmt.Sprintf("%s %s %v (%d-byte body)", method, req.URL.RequestURI(), hdr, len(body))
	h.trace = append(h.trace, fmt.Sprintf("%s -> %d", desc, rec.Code))
	if took > 2*time.Second {
		h.fatalf("%s took %v", desc, took)
	}
	res := fzResponse{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	if res.code >= 500 {
		h.fatalf("%s answered %d: %s", desc, res.code, res.body)
	}
	if strings.EqualFold(res.header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(bytes.NewReader(res.body))
		if err != nil {
			h.fatalf("%s: gzip answer: %v", desc, err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			h.fatalf("%s: gzip answer: %v", desc, err)
		}
		res.body = plain
	}
	if !check || res.code/100 != 2 || res.code == http.StatusNoContent || method == "HEAD" {
		return res
	}
	ct := res.header.Get("Content-Type")
	switch {
	case strings.Contains(ct, "event-stream"):
		for _, line := range strings.Split(string(res.body), "\n") {
			if data, ok := strings.CutPrefix(line, "data:"); ok && !json.Valid([]byte(data)) {
				h.fatalf("%s answered an event whose data is not JSON: %q\n%s", desc, line, res.body)
			}
		}
	case strings.Contains(ct, "json"):
		if watch && len(res.body) == 0 {
			break // the client went away before anything changed
		}
		if !json.Valid(res.body) {
			h.fatalf("%s answered %d %s with a body that is not JSON: %q", desc, res.code, ct, res.body)
		}
	case strings.Contains(ct, "xml"):
		if err := wiretest.WellFormedXML(res.body); err != nil {
			h.fatalf("%s answered %d %s with a body that is not XML (%v): %q", desc, res.code, ct, err, res.body)
		}
	}
	return res
}

func (h *fzHarness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s\nrequests:\n  %s", fmt.Sprintf(format, args...), strings.Join(h.trace, "\n  "))
}

func fzHeader(b byte) http.Header {
	hdr := http.Header{}
	switch b & 3 {
	case hJSON:
		hdr.Set("Accept", "application/json")
	case hXML:
		hdr.Set("Accept", "application/xml")
	case hBoth:
		hdr.Set("Accept", "application/json;q=0.9, application/xml;q=0.8")
	}
	if b&hGzip != 0 {
		hdr.Set("Accept-Encoding", "gzip")
	}
	switch b & (3 << 3) {
	case hCTJSON:
		hdr.Set("Content-Type", "application/json")
	case hCTXML:
		hdr.Set("Content-Type", "application/xml; charset=utf-8")
	case hCTText:
		hdr.Set("Content-Type", "text/plain")
	}
	if b&(3<<5) != 0 {
		hdr.Set("Content-Encoding", "gzip")
	}
	hdr.Set("DiscoveryIdentity-Name", "DefaultClient")
	hdr.Set("DiscoveryIdentity-Version", "1.4")
	return hdr
}

func fzGzip(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// step sends one fuzzed request and checks what its answer promises.
func (h *fzHarness) step(routeB, methodB, hdrB byte, app, id, query string, body []byte) {
	rt := fzRoutes[int(routeB)%len(fzRoutes)]
	op := int(routeB) % len(fzRoutes)
	method := rt.method
	if m := int(methodB) % (len(fzMethods) + 4); m >= 4 || method == "" {
		method = fzMethods[m%len(fzMethods)]
	}
	base := "/eureka"
	if hdrB&hV2 != 0 {
		base = "/eureka/v2"
	}
	target := strings.NewReplacer("{base}", base, "{app}", fzSeg(app), "{id}", fzSeg(id)).Replace(rt.path)
	rawPath := ""
	if op == fzRaw {
		rawPath = "/" + app
	}
	var sent []byte
	if rt.body || method == "POST" || method == "PUT" {
		sent = body
		switch hdrB & (3 << 5) {
		case hCEGzip:
			sent = fzGzip(body)
		case hCETrunc:
			z := fzGzip(body)
			sent = z[:len(z)/2]
		}
	}
	hdr := fzHeader(hdrB)
	q := fzQuery(query)
	res := h.serve(method, target, rawPath, q, hdr, sent, op == fzWatch)
	if method != rt.method || res.code/100 != 2 {
		return
	}
	values, _ := url.ParseQuery(q)
	r := h.r
	switch op {
	case fzRegister:
		in := fzDecodeLikeHandler(hdr.Get("Content-Type"), body)
		if in == nil {
			h.fatalf("register answered %d to a body the decoders refuse", res.code)
		}
		if err := in.Validate(app); err != nil {
			h.fatalf("register answered %d to an instance that does not validate: %v", res.code, err)
		}
		got, err := r.Instance(in.App, in.InstanceID)
		if err != nil {
			h.fatalf("registered %s/%q, then: %v", in.App, in.InstanceID, err)
		}
		if got.IPAddr != in.IPAddr || got.Port != in.Port || got.PortEnabled != in.PortEnabled {
			h.fatalf("registered %+v, the registry holds %+v", in, got)
		}
		h.readBack(base, in.App, in.InstanceID)
	case fzCancel:
		if _, err := r.Instance(app, id); err == nil {
			h.fatalf("cancelled %s/%q, still there", app, id)
		}
	case fzSetStatus:
		got, err := r.Instance(app, id)
		if err != nil {
			h.fatalf("status of %s/%q set, then: %v", app, id, err)
		}
		if want := registryapi.ParseStatus(values.Get("value")); got.EffectiveStatus() != want {
			h.fatalf("status of %s/%q set to %s, reads %s", app, id, want, got.EffectiveStatus())
		}
	case fzDeleteStatus:
		got, err := r.Instance(app, id)
		if err != nil {
			h.fatalf("override of %s/%q removed, then: %v", app, id, err)
		}
		if got.OverriddenStatus != registryapi.StatusUnknown {
			h.fatalf("override of %s/%q removed (200), but it still reads overriddenStatus %s (status %s, effective %s)",
				app, id, got.OverriddenStatus, got.Status, got.EffectiveStatus())
		}
	case fzMetadata:
		got, err := r.Instance(app, id)
		if err != nil {
			h.fatalf("metadata of %s/%q set, then: %v", app, id, err)
		}
		for k, vs := range values {
			if got.Metadata[k] != vs[len(vs)-1] {
				h.fatalf("metadata %q of %s/%q set to %q, reads %q", k, app, id, vs[len(vs)-1], got.Metadata[k])
			}
		}
	case fzDeregisterShard:
		shardsApp := r.opts.ShardsApp
		if a := values.Get("app"); a != "" {
			shardsApp = strings.ToUpper(a)
		}
		if _, err := r.Instance(shardsApp, id); err == nil {
			h.fatalf("deregistered shard %s/%q, still there", shardsApp, id)
		}
	}
}

// fzDecodeLikeHandler picks the decoder as the register handler does.
func fzDecodeLikeHandler(ct string, b []byte) *registryapi.Instance {
	ct = strings.ToLower(ct)
	trimmed := bytes.TrimSpace(b)
	var in *registryapi.Instance
	var err error
	if strings.Contains(ct, "json") || !strings.Contains(ct, "xml") && len(trimmed) > 0 && trimmed[0] == '{' {
		in, err = registryapi.DecodeInstanceJSON(b)
	} else {
		in, err = registryapi.DecodeInstanceXML(b)
	}
	if err != nil {
		return nil
	}
	return in
}

// readBack fetches a registered instance as a client would, in both
// formats.
func (h *fzHarness) readBack(base, app, id string) {
	if id == "." || id == ".." {
		return // the mux cleans such a path before routing it
	}
	target := base + "/apps/" + fzSeg(app) + "/" + fzSeg(id)
	for _, asJSON := range []bool{true, false} {
		hdr := http.Header{}
		if asJSON {
			hdr.Set("Accept", "application/json")
		}
		res := h.serve("GET", target, "", "", hdr, nil, false)
		if res.code != http.StatusOK {
			h.fatalf("GET %s of a registered instance answered %d: %s", target, res.code, res.body)
		}
		var in *registryapi.Instance
		var err error
		if asJSON {
			in, err = registryapi.DecodeInstanceJSON(res.body)
		} else {
			in, err = registryapi.DecodeInstanceXML(res.body)
		}
		if err != nil {
			h.fatalf("GET %s (json %v): %v\n%s", target, asJSON, err, res.body)
		}
		wantApp, wantID := fzWireText(app, !asJSON), fzWireText(id, !asJSON)
		if in.InstanceID != wantID || in.App != wantApp {
			h.fatalf("GET %s (json %v) read back %q/%q, want %q/%q", target, asJSON, in.App, in.InstanceID, wantApp, wantID)
		}
	}
}

// fzWireText is how an id reads back through registryapi.DecodeInstanceJSON or
// registryapi.DecodeInstanceXML: XML cannot carry some characters (the encoder writes
// U+FFFD) and the XML decoder trims ids.
func fzWireText(s string, asXML bool) string {
	if !asXML {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.TrimSpace(fzXMLSafe(s))
}

// fzXMLSafe is a string as XML 1.0 can carry it.
func fzXMLSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == 0x09 || r == 0x0A || r == 0x0D || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF {
			return r
		}
		return '\uFFFD'
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// fetchApps reads GET /eureka/apps (or /delta) and checks it is what
// clients parse.
func (h *fzHarness) fetchApps(delta, asXML bool) *registryapi.Applications {
	target := "/eureka/apps"
	if delta {
		target += "/delta"
	}
	hdr := http.Header{}
	if !asXML {
		hdr.Set("Accept", "application/json")
	}
	res := h.serveChecked("GET", target, "", "", hdr, nil, false, false)
	if res.code != http.StatusOK {
		h.fatalf("GET %s answered %d: %s", target, res.code, res.body)
	}
	if asXML {
		apps, err := registryapi.DecodeAppsXML(res.body)
		if err != nil {
			h.fatalf("GET %s (XML): %v\n%s", target, err, res.body)
		}
		return apps
	}
	var anyDoc any
	if err := json.Unmarshal(res.body, &anyDoc); err != nil {
		h.fatalf("GET %s (JSON): %v\n%s", target, err, res.body)
	}
	apps, err := registryapi.DecodeAppsJSON(res.body)
	if err != nil {
		h.fatalf("GET %s (JSON): registryapi.DecodeAppsJSON: %v\n%s", target, err, res.body)
	}
	return apps
}

// fzHashcode is apps__hashcode computed here, independently.
func fzHashcode(statuses []registryapi.Status) string {
	counts := map[registryapi.Status]int{}
	for _, s := range statuses {
		counts[s]++
	}
	var b strings.Builder
	for _, st := range []registryapi.Status{"DOWN", "OUT_OF_SERVICE", "STARTING", "UNKNOWN", "UP"} {
		if counts[st] > 0 {
			fmt.Fprintf(&b, "%s_%d_", st, counts[st])
			delete(counts, st)
		}
	}
	for st, n := range counts {
		fmt.Fprintf(&b, "?%s_%d_", st, n)
	}
	return b.String()
}

type fzListed struct {
	app, id string
	status  registryapi.Status
}

func fzList(apps *registryapi.Applications) ([]fzListed, []registryapi.Status) {
	var out []fzListed
	var sts []registryapi.Status
	for _, a := range apps.Applications {
		for _, in := range a.Instances {
			out = append(out, fzListed{a.Name, in.InstanceID, in.Status})
			sts = append(sts, in.Status)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].app != out[j].app {
			return out[i].app < out[j].app
		}
		return out[i].id < out[j].id
	})
	return out, sts
}

// checkConsistent: the full fetch reads in JSON and XML, lists what the
// registry holds with a matching apps__hashcode, and a client that applied
// the delta holds the same.
func (h *fzHarness) checkConsistent() {
	var want []fzListed
	var wantSt []registryapi.Status
	for _, in := range h.r.Instances("") {
		want = append(want, fzListed{in.App, in.InstanceID, in.EffectiveStatus()})
		wantSt = append(wantSt, in.EffectiveStatus())
	}
	sort.Slice(want, func(i, j int) bool {
		if want[i].app != want[j].app {
			return want[i].app < want[j].app
		}
		return want[i].id < want[j].id
	})
	wantHash := fzHashcode(wantSt)
	// The clock stands still here: every lease was renewed or granted
	// now, for at least a second, so none has expired.
	if n := h.r.Evict(); n != 0 {
		h.fatalf("%d leases evicted with the clock standing still at their registration", n)
	}
	for _, asXML := range []bool{false, true} {
		full := h.fetchApps(false, asXML)
		got, sts := fzList(full)
		if full.AppsHashcode != fzHashcode(sts) {
			h.fatalf("full fetch (xml %v): apps__hashcode %q, but it lists %d instances: %s", asXML, full.AppsHashcode, len(got), fzHashcode(sts))
		}
		if full.AppsHashcode != wantHash {
			h.fatalf("full fetch (xml %v): apps__hashcode %q, the registry holds %s", asXML, full.AppsHashcode, wantHash)
		}
		wantHere := want
		if asXML {
			wantHere = make([]fzListed, len(want))
			for i, w := range want {
				wantHere[i] = fzListed{fzXMLSafe(w.app), fzXMLSafe(w.id), w.status}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(wantHere) {
			h.fatalf("full fetch (xml %v) lists\n  %v\nthe registry holds\n  %v", asXML, got, wantHere)
		}
	}
	// A Eureka client applies the delta to its copy, then compares its
	// hashcode with the delta's; a difference makes it fetch everything.
	delta := h.fetchApps(true, false)
	for _, a := range delta.Applications {
		for _, in := range a.Instances {
			ref := registryapi.InstanceRef{App: in.App, ID: in.InstanceID}
			switch in.ActionType {
			case registryapi.ActionAdded, registryapi.ActionModified:
				h.copy[ref] = in
			case registryapi.ActionDeleted:
				delete(h.copy, ref)
			default:
				h.fatalf("delta: instance %s/%q with actionType %q", in.App, in.InstanceID, in.ActionType)
			}
		}
	}
	var mine []fzListed
	var mineSt []registryapi.Status
	for ref, in := range h.copy {
		mine = append(mine, fzListed{ref.App, ref.ID, in.Status})
		mineSt = append(mineSt, in.Status)
	}
	sort.Slice(mine, func(i, j int) bool {
		if mine[i].app != mine[j].app {
			return mine[i].app < mine[j].app
		}
		return mine[i].id < mine[j].id
	})
	if got := fzHashcode(mineSt); got != delta.AppsHashcode {
		h.fatalf("a client that applied the delta has %s, the delta's apps__hashcode is %q", got, delta.AppsHashcode)
	}
	if fmt.Sprint(mine) != fmt.Sprint(want) {
		h.fatalf("a client that applied the delta holds\n  %v\nthe registry holds\n  %v", mine, want)
	}
	// Every registered shard holds its own slot, 1-31, named in its
	// metadata; no two share one.
	h.r.mu.RLock()
	slots := maps.Clone(h.r.slots)
	h.r.mu.RUnlock()
	holder := map[int]string{}
	for _, in := range h.r.Instances(h.r.opts.ShardsApp) {
		slot := slots[registryapi.InstanceRef{App: in.App, ID: in.InstanceID}]
		if slot < 1 || slot > 31 || in.Metadata[registryapi.MetaSlot] != strconv.Itoa(slot) {
			h.fatalf("shard %q: slot %d, metadata slot %q", in.InstanceID, slot, in.Metadata[registryapi.MetaSlot])
		}
		if other, ok := holder[slot]; ok {
			h.fatalf("shards %q and %q both hold slot %d", other, in.InstanceID, slot)
		}
		holder[slot] = in.InstanceID
	}
	// shardctl's view of every app must encode too.
	apps := map[string]bool{h.r.opts.ShardsApp: true}
	for _, w := range want {
		apps[w.app] = true
	}
	for app := range apps {
		res := h.serve("GET", "/shardctl/v1/shards", "", "app="+url.QueryEscape(app), nil, nil, false)
		if res.code != http.StatusOK {
			h.fatalf("GET /shardctl/v1/shards?app=%s answered %d", app, res.code)
		}
	}
}

func fzFlat(apps *registryapi.Applications) []*registryapi.Instance {
	var out []*registryapi.Instance
	for _, a := range apps.Applications {
		out = append(out, a.Instances...)
	}
	return out
}

// checkEnd: gzip answers match plain ones, the status counts what is
// listed, and a bolt store reopened holds what the registry held.
func (h *fzHarness) checkEnd() {
	plain := h.serve("GET", "/eureka/v2/apps", "", "", http.Header{"Accept": {"application/json"}}, nil, false)
	zipped := h.serve("GET", "/eureka/v2/apps", "", "", http.Header{"Accept": {"application/json"}, "Accept-Encoding": {"gzip"}}, nil, false)
	if !bytes.Equal(plain.body, zipped.body) {
		h.fatalf("gzipped full fetch differs from the plain one")
	}
	delta, xmlDelta := h.fetchApps(true, false), h.fetchApps(true, true)
	if len(fzFlat(xmlDelta)) != len(fzFlat(delta)) || xmlDelta.AppsHashcode != delta.AppsHashcode {
		h.fatalf("delta lists %d instances (%s) in XML, %d (%s) in JSON",
			len(fzFlat(xmlDelta)), xmlDelta.AppsHashcode, len(fzFlat(delta)), delta.AppsHashcode)
	}
	st := h.serve("GET", "/shardctl/v1/status", "", "", nil, nil, false)
	var health registryapi.Health
	if err := json.Unmarshal(st.body, &health); err != nil {
		h.fatalf("status: %v", err)
	}
	if n := len(h.r.Instances("")); health.Instances != n {
		h.fatalf("status counts %d instances, the registry holds %d", health.Instances, n)
	}
	if h.bolt == "" {
		return
	}
	before := h.state(h.r)
	if err := h.r.Close(); err != nil {
		h.fatalf("close: %v", err)
	}
	h.r = nil
	store, err := store.OpenBoltStore(h.bolt)
	if err != nil {
		h.fatalf("reopen the bolt store: %v", err)
	}
	r2, err := NewRegistry(Options{Now: func() time.Time { return fzNow }, Store: store, ReadStaleness: -1})
	if err != nil {
		store.Close()
		h.fatalf("a registry on the reopened store: %v", err)
	}
	h.r = r2
	after := h.state(r2)
	b, a := strings.Split(before, "\n  "), strings.Split(after, "\n  ")
	for i := range b {
		if a[i] != b[i] {
			h.fatalf("after a restart on the bolt store the registry holds\n  %s\nbefore it held\n  %s", a[i], b[i])
		}
	}
}

// state is what a store must keep, as clients see it (JSON, where invalid
// UTF-8 reads as U+FFFD): instances, overrides, slots and the ledger.
func (h *fzHarness) state(r *Registry) string {
	var b strings.Builder
	b.Write(fzNormJSON(registryapi.EncodeAppsJSON(&registryapi.Applications{AppsHashcode: registryapi.Hashcode(r.Instances("")), Applications: registryapi.Group(r.Instances(""))})))
	r.mu.RLock()
	ov := make([]string, 0, len(r.overrides))
	for ref, o := range r.overrides {
		ov = append(ov, fmt.Sprintf("%q/%q=%+v", fzValid(ref.App), fzValid(ref.ID), o))
	}
	sl := make([]string, 0, len(r.slots))
	for ref, s := range r.slots {
		sl = append(sl, fmt.Sprintf("%q/%q=%d", fzValid(ref.App), fzValid(ref.ID), s))
	}
	r.mu.RUnlock()
	sort.Strings(ov)
	sort.Strings(sl)
	fmt.Fprintf(&b, "\n  overrides %v\n  slots %v\n  ", ov, sl)
	d, _ := json.Marshal(r.Deployments())
	b.Write(fzNormJSON(d))
	return b.String()
}

func fzValid(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// fzNormJSON re-encodes JSON so that strings that differ only in how
// they were invalid UTF-8 compare equal.
func fzNormJSON(b []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return b
	}
	out, err := json.Marshal(v)
	if err != nil {
		return b
	}
	return out
}
