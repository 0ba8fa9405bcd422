package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// ---------------------------------------------------------------------------
// TestBoltStoreSurvivesKill: a registry process under write load is killed
// with SIGKILL; restarted on the same file it must hold every write it
// acknowledged.
// ---------------------------------------------------------------------------

// boltKillRounds is how many times the kill test kills a registry, each
// time at another point of its load.
const boltKillRounds = 3

func TestBoltStoreSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds shardctl and runs registry processes")
	}
	t.Parallel() // waits on processes and fsync
	dir := t.TempDir()
	start := time.Now()
	bin := proctest.Build(t)
	t.Logf("built shardctl in %v", time.Since(start).Round(time.Millisecond))

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for round := range boltKillRounds {
		// One kill point in each third of the load: early, middle, late.
		killAfter := 250*time.Millisecond + time.Duration(round)*550*time.Millisecond +
			time.Duration(rng.Int64N(int64(500*time.Millisecond)))
		t.Run(fmt.Sprintf("kill%d", round+1), func(t *testing.T) {
			// Each round has its process and file; they wait mostly on
			// fsync, which overlaps.
			t.Parallel()
			boltKillRound(t, bin, filepath.Join(dir, fmt.Sprintf("round%d", round+1)), round+1, killAfter, seed+uint64(round)+1)
		})
	}
}

// startBoltRegistry runs `shardctl registry serve` on a bolt file and
// returns once it prints its "listening on" line. The process is stopped
// when the test ends, whatever happens.
func startBoltRegistry(t *testing.T, bin, db string) *proctest.Process {
	t.Helper()
	return proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0", "--store", "bolt:"+db,
		"--eviction-interval", "1s", "--self-preservation=false")
}

// The writes of the load.
type boltOpKind int

const (
	boltOpRegister boltOpKind = iota
	boltOpCancel
	boltOpStatus   // PUT …/status?value=OUT_OF_SERVICE
	boltOpUnstatus // DELETE …/status
	boltOpDrain    // PUT /shardctl/v1/shards/{id}/state?value=DRAINING
	boltOpMetadata
	boltOpLedger
	boltOpKinds
)

var boltOpNames = [boltOpKinds]string{"register", "cancel", "status", "unstatus", "drain", "metadata", "ledger"}

func (k boltOpKind) String() string { return boltOpNames[k] }

type boltKey struct{ app, id string }

func (k boltKey) String() string { return k.app + "/" + k.id }

// boltInst is what the registry must hold of one instance.
type boltInst struct {
	registered bool
	gen        int // of the registration: port, ipAddr
	meta       map[string]string
	override   registryapi.Override // outlives cancels, as the registry promises
}

type boltOp struct {
	kind   boltOpKind
	key    boltKey
	gen    int
	meta   map[string]string // registration metadata, or the entries put
	ledger string            // resource name of a ledger append
}

func (o boltOp) String() string {
	if o.kind == boltOpLedger {
		return "ledger append " + o.ledger
	}
	return fmt.Sprintf("%v %v gen=%d meta=%v", o.kind, o.key, o.gen, o.meta)
}

// apply is an acknowledged op's effect on an instance.
func (m boltInst) apply(o boltOp) boltInst {
	m.meta = maps.Clone(m.meta)
	switch o.kind {
	case boltOpRegister:
		m.registered, m.gen, m.meta = true, o.gen, maps.Clone(o.meta)
	case boltOpCancel:
		m.registered = false
	case boltOpStatus:
		m.override = registryapi.Override{Status: registryapi.StatusOutOfService}
	case boltOpUnstatus:
		m.override = registryapi.Override{}
	case boltOpDrain:
		m.override = registryapi.Override{Status: registryapi.StatusOutOfService, Draining: true}
	case boltOpMetadata:
		if m.meta == nil {
			m.meta = map[string]string{}
		}
		maps.Copy(m.meta, o.meta)
	}
	return m
}

type boltLedgerAck struct {
	name string
	seq  int // 0: acknowledged, but the body with the seq was lost
}

// boltWorker writes to its own instances, so that each instance's writes
// are in order, and stops at its first write without an answer.
type boltWorker struct {
	id, round int
	rng       *rand.Rand
	client    *http.Client
	base      string

	keys     map[boltKey]*boltInst // acknowledged state
	order    []boltKey
	shards   int
	gen      int
	pending  *boltOp // the write in flight at the kill
	acked    [boltOpKinds]int
	ledger   []boltLedgerAck
	slots    map[string]int // shard id -> slot the registry gave it
	problems []string
}

func (w *boltWorker) problem(format string, args ...any) {
	w.problems = append(w.problems, fmt.Sprintf("worker %d: ", w.id)+fmt.Sprintf(format, args...))
}

var boltApps = []string{"ORDERS", "PAYMENTS", "ZEEBE-SHARDS"}

// boltShardsPerWorker keeps every round's shards within the 31 slots.
const boltShardsPerWorker = 5

func (w *boltWorker) registered() []boltKey {
	var out []boltKey
	for _, k := range w.order {
		if w.keys[k].registered {
			out = append(out, k)
		}
	}
	return out
}

// next picks a write that the registry should accept.
func (w *boltWorker) next() boltOp {
	reg := w.registered()
	n := w.rng.IntN(100)
	if len(reg) == 0 {
		n = 0
	}
	pick := func() boltKey { return reg[w.rng.IntN(len(reg))] }
	switch {
	case n < 30:
		w.gen++
		o := boltOp{kind: boltOpRegister, gen: w.gen, meta: map[string]string{"gen": strconv.Itoa(w.gen), "worker": strconv.Itoa(w.id)}}
		app := boltApps[w.rng.IntN(len(boltApps))]
		reuse := len(w.order) > 0 && w.rng.IntN(2) == 0
		if app == "ZEEBE-SHARDS" && w.shards >= boltShardsPerWorker {
			reuse = true
		}
		if reuse {
			o.key = w.order[w.rng.IntN(len(w.order))]
			return o
		}
		if app == "ZEEBE-SHARDS" {
			w.shards++
			o.key = boltKey{app, fmt.Sprintf("r%d-w%d-shard%d", w.round, w.id, w.shards)}
		} else {
			o.key = boltKey{app, fmt.Sprintf("r%d-w%d-%s%d", w.round, w.id, strings.ToLower(app), len(w.order))}
		}
		w.keys[o.key] = &boltInst{}
		w.order = append(w.order, o.key)
		return o
	case n < 42:
		return boltOp{kind: boltOpCancel, key: pick()}
	case n < 54:
		return boltOp{kind: boltOpStatus, key: pick()}
	case n < 60:
		return boltOp{kind: boltOpUnstatus, key: pick()}
	case n < 72:
		// Mostly shards, which this route is for; ?app= reaches the others.
		k := pick()
		for range 3 {
			if k.app == "ZEEBE-SHARDS" {
				break
			}
			k = pick()
		}
		return boltOp{kind: boltOpDrain, key: k}
	case n < 86:
		w.gen++
		return boltOp{kind: boltOpMetadata, key: pick(), meta: map[string]string{fmt.Sprintf("m%d", w.rng.IntN(4)): "v" + strconv.Itoa(w.gen)}}
	default:
		w.gen++
		return boltOp{kind: boltOpLedger, ledger: fmt.Sprintf("r%d-w%d-%d.bpmn", w.round, w.id, w.gen)}
	}
}

func boltInstanceBody(k boltKey, gen int, meta map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"instance": map[string]any{
		"instanceId": k.id, "hostName": k.id + ".test", "app": k.app,
		"ipAddr": fmt.Sprintf("10.0.%d.%d", gen/250%250, gen%250+1), "status": "UP",
		"port":           map[string]any{"$": boltPort(gen), "@enabled": "true"},
		"vipAddress":     strings.ToLower(k.app),
		"dataCenterInfo": map[string]any{"@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", "name": "MyOwn"},
		"leaseInfo":      map[string]any{"renewalIntervalInSecs": 10, "durationInSecs": boltLeaseSecs},
		"metadata":       meta,
	}})
	return b
}

func boltPort(gen int) int { return 1024 + gen%60000 }

// boltLeaseSecs outlasts a round, so that nothing expires on its own.
const boltLeaseSecs = 30

type boltOutcome int

const (
	boltAcked boltOutcome = iota
	boltRejected
	boltUnknown // no answer: the process died with the write in flight
)

// send makes one write and says whether the registry acknowledged it.
func (w *boltWorker) send(o boltOp) boltOutcome {
	var (
		method, path string
		body         []byte
		ct           = ""
		q            = url.Values{}
	)
	k := o.key
	inst := "/eureka/apps/" + k.app + "/" + url.PathEscape(k.id)
	switch o.kind {
	case boltOpRegister:
		method, path, body, ct = http.MethodPost, "/eureka/apps/"+k.app, boltInstanceBody(k, o.gen, o.meta), "application/json"
	case boltOpCancel:
		method, path = http.MethodDelete, inst
	case boltOpStatus:
		method, path = http.MethodPut, inst+"/status"
		q.Set("value", string(registryapi.StatusOutOfService))
	case boltOpUnstatus:
		method, path = http.MethodDelete, inst+"/status"
	case boltOpDrain:
		method, path = http.MethodPut, "/shardctl/v1/shards/"+url.PathEscape(k.id)+"/state"
		q.Set("value", registryapi.StateDraining)
		if k.app != "ZEEBE-SHARDS" {
			q.Set("app", k.app)
		}
	case boltOpMetadata:
		method, path = http.MethodPut, inst+"/metadata"
		for mk, mv := range o.meta {
			q.Set(mk, mv)
		}
	case boltOpLedger:
		d := ledger.Deployment{Resources: []ledger.Resource{{Name: o.ledger, Content: []byte("<bpmn:definitions id=\"" + o.ledger + "\"/>")}}}
		body, _ = json.Marshal(d)
		method, path, ct = http.MethodPost, "/shardctl/v1/ledger", "application/json"
	}
	u := w.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		w.problem("%v: %v", o, err)
		return boltRejected
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return boltUnknown
	}
	defer resp.Body.Close()
	rb, rerr := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		w.problem("%v: HTTP %d: %s", o, resp.StatusCode, strings.TrimSpace(string(rb)))
		return boltRejected
	}
	// A status line means the handler finished, store write included.
	switch o.kind {
	case boltOpLedger:
		var d ledger.Deployment
		if rerr != nil || json.Unmarshal(rb, &d) != nil {
			w.ledger = append(w.ledger, boltLedgerAck{name: o.ledger})
		} else {
			w.ledger = append(w.ledger, boltLedgerAck{name: o.ledger, seq: d.Seq})
		}
	case boltOpDrain:
		var s registryapi.Shard
		if rerr == nil && json.Unmarshal(rb, &s) == nil {
			if s.State != registryapi.StateDraining {
				w.problem("%v: answered state %s", o, s.State)
			}
			w.noteSlot(k, s.Slot)
		}
	}
	return boltAcked
}

// noteSlot checks that a shard keeps the slot it was given.
func (w *boltWorker) noteSlot(k boltKey, slot int) {
	if k.app != "ZEEBE-SHARDS" {
		return
	}
	if slot < 1 || slot > 31 {
		w.problem("shard %s has slot %d", k.id, slot)
		return
	}
	if old, ok := w.slots[k.id]; ok && old != slot {
		w.problem("shard %s moved from slot %d to %d", k.id, old, slot)
	}
	w.slots[k.id] = slot
}

// run writes until the process dies (or the deadline passes).
func (w *boltWorker) run(deadline time.Time) {
	for time.Now().Before(deadline) {
		o := w.next()
		switch w.send(o) {
		case boltUnknown:
			w.pending = &o
			return
		case boltRejected:
			continue
		}
		w.acked[o.kind]++
		if o.kind == boltOpLedger {
			continue
		}
		*w.keys[o.key] = w.keys[o.key].apply(o)
		if o.kind == boltOpRegister && o.key.app == "ZEEBE-SHARDS" {
			// Read the slot the registry gave; a read lost to the kill is
			// not a write in flight.
			s, code, err := boltGetShard(w.client, w.base, o.key)
			if err != nil {
				return
			}
			if code != http.StatusOK {
				w.problem("GET shard %s after its registration: HTTP %d", o.key.id, code)
				continue
			}
			w.noteSlot(o.key, s.Slot)
		}
	}
}

func boltGetShard(c *http.Client, base string, k boltKey) (registryapi.Shard, int, error) {
	u := base + "/shardctl/v1/shards/" + url.PathEscape(k.id) + "?app=" + url.QueryEscape(k.app)
	resp, err := c.Get(u)
	if err != nil {
		return registryapi.Shard{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return registryapi.Shard{}, 0, err
	}
	var s registryapi.Shard
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &s); err != nil {
			return registryapi.Shard{}, 0, fmt.Errorf("GET %s: %w: %s", u, err, b)
		}
	}
	return s, resp.StatusCode, nil
}

func boltGetInstance(c *http.Client, base string, k boltKey) (*registryapi.Instance, int, error) {
	req, _ := http.NewRequest(http.MethodGet, base+"/eureka/apps/"+k.app+"/"+url.PathEscape(k.id), nil)
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, nil
	}
	in, err := registryapi.DecodeInstanceJSON(b)
	return in, resp.StatusCode, err
}

func boltGetJSON(c *http.Client, u string, v any) error {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %s", u, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}

func boltNewClient() (*http.Client, *http.Transport) {
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 10 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}, tr
}

// boltSeen is what the restarted registry says of one instance.
type boltSeen struct {
	in    *registryapi.Instance
	shard registryapi.Shard
}

func (s boltSeen) metaWithoutSlot() map[string]string {
	m := maps.Clone(s.in.Metadata)
	delete(m, registryapi.MetaSlot)
	return m
}

// boltMatch says how the registry's instance differs from a model of it,
// "" when it does not.
func boltMatch(m boltInst, seen *boltSeen) string {
	if !m.registered {
		if seen != nil {
			return "present"
		}
		return ""
	}
	if seen == nil {
		return "absent"
	}
	var diffs []string
	in := seen.in
	if in.Port != boltPort(m.gen) {
		diffs = append(diffs, fmt.Sprintf("port %d, want %d (registration %d)", in.Port, boltPort(m.gen), m.gen))
	}
	if got := seen.metaWithoutSlot(); !(len(got) == 0 && len(m.meta) == 0) && !maps.Equal(got, m.meta) {
		diffs = append(diffs, fmt.Sprintf("metadata %v, want %v", got, m.meta))
	}
	wantOverridden, wantStatus, wantState := registryapi.StatusUnknown, registryapi.StatusUp, registryapi.StateUp
	if m.override.Status != "" {
		wantOverridden, wantStatus, wantState = m.override.Status, m.override.Status, registryapi.StateOutOfService
	}
	if m.override.Draining {
		wantState = registryapi.StateDraining
	}
	if in.OverriddenStatus != wantOverridden {
		diffs = append(diffs, fmt.Sprintf("overriddenStatus %s, want %s", in.OverriddenStatus, wantOverridden))
	}
	if in.Status != wantStatus {
		diffs = append(diffs, fmt.Sprintf("status %s, want %s", in.Status, wantStatus))
	}
	if seen.shard.State != wantState {
		diffs = append(diffs, fmt.Sprintf("shard state %s, want %s (override %+v)", seen.shard.State, wantState, m.override))
	}
	return strings.Join(diffs, "; ")
}

func boltKillRound(t *testing.T, bin, dir string, round int, killAfter time.Duration, seed uint64) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "registry.db")
	p := startBoltRegistry(t, bin, db)
	client, tr := boltNewClient()
	defer tr.CloseIdleConnections()

	const workers = 6
	ws := make([]*boltWorker, workers)
	for i := range ws {
		ws[i] = &boltWorker{id: i, round: round, rng: rand.New(rand.NewPCG(seed, uint64(i))), client: client, base: "http://" + p.Addr,
			keys: map[boltKey]*boltInst{}, slots: map[string]int{}}
	}
	loadStart := time.Now()
	deadline := loadStart.Add(2 * time.Second)
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { w.run(deadline) })
	}
	var killedAt time.Duration
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		time.Sleep(killAfter)
		killedAt = time.Since(loadStart)
		p.Kill() // SIGKILL, while the workers write
	}()
	wg.Wait()
	<-killed
	tr.CloseIdleConnections()
	waitStatus := fmt.Sprint(p.Err())
	if waitStatus != "signal: killed" {
		t.Errorf("the registry ended %s before it was killed:\n%s", waitStatus, p.Stderr())
	}

	var acked [boltOpKinds]int
	total, inFlight := 0, 0
	for _, w := range ws {
		for k, n := range w.acked {
			acked[k] += n
			total += n
		}
		if w.pending != nil {
			inFlight++
		}
		for _, pr := range w.problems {
			t.Errorf("during the load: %s", pr)
		}
	}
	var parts []string
	for k, n := range acked {
		parts = append(parts, fmt.Sprintf("%s %d", boltOpKind(k), n))
	}
	t.Logf("killed at %v (%s); %d writes acknowledged (%s), %d in flight",
		killedAt.Round(time.Millisecond), waitStatus, total, strings.Join(parts, ", "), inFlight)
	if total == 0 {
		t.Errorf("no write acknowledged before the kill")
	}

	restart := time.Now()
	p2 := startBoltRegistry(t, bin, db)
	t.Logf("restarted in %v", time.Since(restart).Round(time.Millisecond))
	boltVerify(t, p2, ws, restart)
}

func boltVerify(t *testing.T, p *proctest.Process, ws []*boltWorker, restart time.Time) {
	client, tr := boltNewClient()
	defer tr.CloseIdleConnections()
	base := "http://" + p.Addr
	restartMs := restart.UnixMilli()

	errs := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if errs++; errs <= 40 {
			t.Errorf(format, args...)
		} else if errs == 41 {
			t.Errorf("(more differences not shown)")
		}
	}

	// Every instance the restarted registry holds must be one the load
	// wrote.
	touched := map[boltKey]bool{}
	for _, w := range ws {
		for k := range w.keys {
			touched[k] = true
		}
	}
	var apps struct {
		Applications struct {
			Application []struct {
				Name     string `json:"name"`
				Instance []struct {
					InstanceID string `json:"instanceId"`
				} `json:"instance"`
			} `json:"application"`
		} `json:"applications"`
	}
	if err := boltGetJSON(client, base+"/eureka/apps", &apps); err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, a := range apps.Applications.Application {
		for _, in := range a.Instance {
			listed++
			if !touched[boltKey{a.Name, in.InstanceID}] {
				fail("restarted registry holds %s/%s, which the load never registered", a.Name, in.InstanceID)
			}
		}
	}

	present, absent, slotsChecked := 0, 0, 0
	slotOwner := map[int]string{}
	matched := map[boltKey]boltInst{} // the state each instance was found in
	now := time.Now()
	for _, w := range ws {
		for _, k := range w.order {
			m := *w.keys[k]
			seen, err := boltObserve(client, base, k)
			if err != nil {
				t.Fatal(err)
			}
			if seen != nil {
				present++
			} else {
				absent++
			}

			// The acknowledged state, or that and the write in flight.
			diff := boltMatch(m, seen)
			if diff == "" {
				matched[k] = m
			} else if w.pending != nil && w.pending.key == k {
				if alt := boltMatch(m.apply(*w.pending), seen); alt == "" {
					diff = ""
					matched[k] = m.apply(*w.pending)
				} else {
					diff = fmt.Sprintf("%s; nor is it the write in flight (%v), which may have been half applied: %s", diff, *w.pending, alt)
				}
			}
			if diff != "" {
				fail("%v after the restart: %s (acknowledged: registered=%v gen=%d meta=%v override=%+v)",
					k, diff, m.registered, m.gen, m.meta, m.override)
			}
			if seen == nil {
				continue
			}

			// Slots: the same as before the kill, one shard each.
			if k.app == "ZEEBE-SHARDS" {
				slot, _ := strconv.Atoi(seen.in.Metadata[registryapi.MetaSlot])
				if slot != seen.shard.Slot {
					fail("shard %s: metadata slot %d, shard API slot %d", k.id, slot, seen.shard.Slot)
				}
				if slot < 1 || slot > 31 {
					fail("shard %s: slot %d after the restart", k.id, slot)
				} else if other, ok := slotOwner[slot]; ok {
					fail("slot %d belongs to both %s and %s after the restart", slot, other, k.id)
				}
				slotOwner[slot] = k.id
				if before, ok := w.slots[k.id]; ok {
					slotsChecked++
					if before != slot {
						fail("shard %s: slot %d before the kill, %d after the restart", k.id, before, slot)
					}
				}
			}

			// Leases are not stored: each starts again at the restart.
			lr := seen.in.LeaseInfo.LastRenewalTimestamp
			if lr < restartMs || lr > now.UnixMilli()+1000 {
				fail("%v: lastRenewalTimestamp %s, want after the restart at %s", k,
					time.UnixMilli(lr).Format(time.StampMilli), restart.Format(time.StampMilli))
			}
			if seen.in.LeaseInfo.DurationInSecs != boltLeaseSecs {
				fail("%v: lease duration %ds, want %ds", k, seen.in.LeaseInfo.DurationInSecs, boltLeaseSecs)
			}
			if exp := seen.shard.LeaseExpires; exp == nil || exp.Before(restart.Add(boltLeaseSecs*time.Second)) {
				fail("%v: lease expires at %v, want a full %ds after the restart at %v", k, exp, boltLeaseSecs, restart)
			}
		}
	}
	if listed != present {
		fail("GET /eureka/apps lists %d instances, GET of each found %d", listed, present)
	}

	// The ledger: every acknowledged append, at its seq; nothing but the
	// appends in flight besides.
	var led struct {
		Deployments []ledger.Deployment `json:"deployments"`
	}
	if err := boltGetJSON(client, base+"/shardctl/v1/ledger", &led); err != nil {
		t.Fatal(err)
	}
	byName := map[string]ledger.Deployment{}
	for i, d := range led.Deployments {
		if d.Seq != i+1 {
			fail("ledger entry %d has seq %d", i+1, d.Seq)
		}
		if len(d.Resources) != 1 {
			fail("ledger entry %d has %d resources, want 1", d.Seq, len(d.Resources))
			continue
		}
		r := d.Resources[0]
		if want := "<bpmn:definitions id=\"" + r.Name + "\"/>"; string(r.Content) != want {
			fail("ledger entry %d (%s): content %q, want %q", d.Seq, r.Name, r.Content, want)
		}
		if _, dup := byName[r.Name]; dup {
			fail("ledger holds %s twice", r.Name)
		}
		byName[r.Name] = d
	}
	ledgerAcked := 0
	inFlight := map[string]bool{}
	for _, w := range ws {
		if w.pending != nil && w.pending.kind == boltOpLedger {
			inFlight[w.pending.ledger] = true
		}
		for _, a := range w.ledger {
			ledgerAcked++
			d, ok := byName[a.name]
			switch {
			case !ok:
				fail("acknowledged ledger append %s (seq %d) is missing after the restart", a.name, a.seq)
			case a.seq != 0 && d.Seq != a.seq:
				fail("ledger append %s: seq %d when acknowledged, %d after the restart", a.name, a.seq, d.Seq)
			}
			delete(byName, a.name)
		}
	}
	for name, d := range byName {
		if !inFlight[name] {
			fail("ledger entry %d (%s) was never appended", d.Seq, name)
		}
	}

	// Nothing was evicted: the leases started again.
	var h registryapi.Health
	if err := boltGetJSON(client, base+"/shardctl/v1/status", &h); err != nil {
		t.Fatal(err)
	}
	if h.Evicted != 0 || h.Instances != present || h.Deployments != len(led.Deployments) {
		fail("status after the restart: %+v; want 0 evicted, %d instances, %d deployments", h, present, len(led.Deployments))
	}

	// Overrides outlive cancels, and slots outlive both, but neither shows
	// until the instance registers again: register every instance once
	// more, which also shows the restarted registry takes writes.
	reregistered, slotsAgain := 0, 0
	shardsPresent := len(slotOwner)
	slotOwner = map[int]string{}
	gen := 1 << 20
	for _, w := range ws {
		for _, k := range w.order {
			m, ok := matched[k]
			if !ok {
				continue // already reported
			}
			gen++
			o := boltOp{kind: boltOpRegister, key: k, gen: gen, meta: map[string]string{"pass": "again"}}
			rw := &boltWorker{id: w.id, client: client, base: base, keys: map[boltKey]*boltInst{k: {}}}
			if rw.send(o) != boltAcked {
				fail("%v: registering again after the restart: %v", k, rw.problems)
				continue
			}
			reregistered++
			seen, err := boltObserve(client, base, k)
			if err != nil {
				t.Fatal(err)
			}
			if diff := boltMatch(m.apply(o), seen); diff != "" {
				why := ""
				if p := w.pending; p != nil && p.key == k {
					why = fmt.Sprintf("; the write in flight at the kill (%v) did not show before this registration", *p)
					if boltMatch(m.apply(*p).apply(o), seen) == "" {
						why = fmt.Sprintf("; the write in flight at the kill (%v) was half applied: its override was stored, "+
							"but the instance read back after the restart did not show it", *p)
					}
				}
				fail("%v registered again after the restart: %s (acknowledged override %+v%s)", k, diff, m.override, why)
			}
			if k.app != "ZEEBE-SHARDS" || seen == nil {
				continue
			}
			slot := seen.shard.Slot
			if other, ok := slotOwner[slot]; ok {
				fail("registered again after the restart, %s and %s share slot %d", other, k.id, slot)
			}
			slotOwner[slot] = k.id
			if before, ok := w.slots[k.id]; ok {
				slotsAgain++
				if before != slot {
					fail("shard %s: slot %d before the kill, %d when registered again after the restart", k.id, before, slot)
				}
			}
		}
	}

	t.Logf("checked %d instances (%d present, %d absent; leases restarted), slots of %d shards (%d known before the kill), %d acknowledged ledger appends (%d entries); "+
		"registered %d again: overrides held, slots of %d shards unique (%d known before the kill)",
		present+absent, present, absent, shardsPresent, slotsChecked, ledgerAcked, len(led.Deployments), reregistered, len(slotOwner), slotsAgain)
}

// boltObserve reads an instance through Eureka's API and shardctl's; nil
// when the registry does not hold it.
func boltObserve(c *http.Client, base string, k boltKey) (*boltSeen, error) {
	in, code, err := boltGetInstance(c, base, k)
	switch {
	case err != nil:
		return nil, fmt.Errorf("GET %v: %w", k, err)
	case code == http.StatusNotFound:
		return nil, nil
	case code != http.StatusOK:
		return nil, fmt.Errorf("GET %v: HTTP %d", k, code)
	}
	sh, code, err := boltGetShard(c, base, k)
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("GET shard %v: HTTP %d, %v", k, code, err)
	}
	return &boltSeen{in: in, shard: sh}, nil
}

// ---------------------------------------------------------------------------
// TestBoltStoreReopen: in-process, what a registry wrote is what a registry
// opened on the same file reads.
// ---------------------------------------------------------------------------

type boltClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *boltClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *boltClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func boltInstance(app, id string, meta map[string]string) *registryapi.Instance {
	return &registryapi.Instance{
		InstanceID: id, App: app, HostName: id + ".test", IPAddr: "10.1.2.3", Status: registryapi.StatusUp,
		Port: 26500, PortEnabled: true, VIPAddress: strings.ToLower(app),
		DataCenterInfo: registryapi.DataCenterInfo{Class: "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", Name: "MyOwn"},
		LeaseInfo:      registryapi.LeaseInfo{RenewalIntervalInSecs: 10, DurationInSecs: 30},
		Metadata:       meta,
	}
}

func boltOpenRegistry(t *testing.T, path string, clock *boltClock) *Registry {
	t.Helper()
	st, err := store.OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRegistry(Options{Store: st, Now: clock.Now, LeaseDuration: 90 * time.Second})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	return r
}

func TestBoltStoreReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := &boltClock{now: t0}
	r := boltOpenRegistry(t, path, clock)
	closed := false
	t.Cleanup(func() {
		if !closed {
			r.Close()
		}
	})

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.Register("orders", boltInstance("orders", "o-1", map[string]string{"zone": "a"})))
	must(r.Register("ORDERS", boltInstance("ORDERS", "o-2", nil)))
	must(r.Register("PAYMENTS", boltInstance("PAYMENTS", "p-1", nil)))
	for _, id := range []string{"s-1", "s-2", "s-3"} {
		must(r.Register("ZEEBE-SHARDS", boltInstance("ZEEBE-SHARDS", id, map[string]string{registryapi.MetaPool: "blue"})))
	}
	must(r.Register("ZEEBE-SHARDS", boltInstance("ZEEBE-SHARDS", "s-4", map[string]string{registryapi.MetaSlot: "7"})))
	clock.set(t0.Add(time.Second))
	must(r.SetOverride("ORDERS", "o-1", registryapi.Override{Status: registryapi.StatusOutOfService}))
	must(r.SetState("ZEEBE-SHARDS", "s-2", registryapi.StateDraining))
	must(r.SetState("ZEEBE-SHARDS", "s-4", registryapi.StateOutOfService))
	must(r.SetMetadata("PAYMENTS", "p-1", map[string]string{"color": "blue"}))
	must(r.SetMetadata("ORDERS", "o-2", map[string]string{registryapi.MetaStatic: "true"}))
	// s-3 goes but keeps its slot; s-1 goes and gives its slot up.
	must(r.Cancel("ZEEBE-SHARDS", "s-3"))
	must(r.Cancel("ZEEBE-SHARDS", "s-1"))
	must(r.ReleaseSlot("ZEEBE-SHARDS", "s-1"))
	d1, err := r.AppendDeployment(ledger.Deployment{
		Resources: []ledger.Resource{{Name: "a.bpmn", Content: []byte("<a/>")}},
		Processes: []ledger.ProcessID{{BpmnProcessID: "a", Version: 1, Keys: map[string]int64{"s-1": 11}}},
	})
	must(err)
	d2, err := r.AppendDeployment(ledger.Deployment{
		Resources:     []ledger.Resource{{Name: "b.bpmn", Content: []byte("<b/>")}, {Name: "b.dmn", Content: []byte("<d/>")}},
		MessageStarts: []string{"go"},
	})
	must(err)
	if d1.Seq != 1 || d2.Seq != 2 {
		t.Fatalf("ledger seqs %d, %d; want 1, 2", d1.Seq, d2.Seq)
	}
	must(r.SetDeploymentKeys(1, "s-2", map[string]int64{ledger.ProcessRef("a", 1): 42}))

	wantSlots := map[registryapi.InstanceRef]int{{App: "ZEEBE-SHARDS", ID: "s-2"}: 2, {App: "ZEEBE-SHARDS", ID: "s-3"}: 3, {App: "ZEEBE-SHARDS", ID: "s-4"}: 7}
	if !reflect.DeepEqual(r.slots, wantSlots) {
		t.Fatalf("slots before reopening: %v, want %v", r.slots, wantSlots)
	}
	beforeInstances := r.Instances("")
	beforeOverrides := maps.Clone(r.overrides)
	beforeSlots := maps.Clone(r.slots)
	beforeLedger := r.Deployments()
	beforeShards := r.Shards("ZEEBE-SHARDS")
	must(r.Close())
	closed = true

	t1 := t0.Add(time.Hour)
	clock.set(t1)
	r2 := boltOpenRegistry(t, path, clock)
	t.Cleanup(func() { r2.Close() })

	after := r2.Instances("")
	if len(after) != len(beforeInstances) {
		t.Fatalf("reopened: %d instances, want %d", len(after), len(beforeInstances))
	}
	for i, in := range after {
		want := beforeInstances[i].Clone()
		if in.LeaseInfo.LastRenewalTimestamp != t1.UnixMilli() {
			t.Errorf("reopened %s/%s: lease renewed at %v, want the reopening at %v", in.App, in.InstanceID,
				time.UnixMilli(in.LeaseInfo.LastRenewalTimestamp).UTC(), t1)
		}
		want.LeaseInfo.LastRenewalTimestamp = in.LeaseInfo.LastRenewalTimestamp
		if !reflect.DeepEqual(in, want) {
			t.Errorf("reopened %s/%s:\n got %+v\nwant %+v", in.App, in.InstanceID, in, want)
		}
	}
	if !reflect.DeepEqual(r2.overrides, beforeOverrides) {
		t.Errorf("reopened overrides %v, want %v", r2.overrides, beforeOverrides)
	}
	if !reflect.DeepEqual(r2.slots, beforeSlots) {
		t.Errorf("reopened slots %v, want %v", r2.slots, beforeSlots)
	}
	if got := r2.Deployments(); !reflect.DeepEqual(got, beforeLedger) {
		t.Errorf("reopened ledger:\n got %+v\nwant %+v", got, beforeLedger)
	}
	if keys := r2.Deployments()[0].Processes[0].Keys; keys["s-2"] != 42 || keys["s-1"] != 11 {
		t.Errorf("reopened ledger keys of seq 1: %v", keys)
	}
	afterShards := r2.Shards("ZEEBE-SHARDS")
	for i := range afterShards {
		afterShards[i].LastRenewal, afterShards[i].LeaseExpires = beforeShards[i].LastRenewal, beforeShards[i].LeaseExpires
	}
	if !reflect.DeepEqual(afterShards, beforeShards) {
		t.Errorf("reopened shards:\n got %+v\nwant %+v", afterShards, beforeShards)
	}
	states := map[string]string{}
	for _, s := range afterShards {
		states[s.ID] = s.State
	}
	if states["s-2"] != registryapi.StateDraining || states["s-4"] != registryapi.StateOutOfService {
		t.Errorf("reopened shard states %v; want s-2 DRAINING, s-4 OUT_OF_SERVICE", states)
	}

	// Slots after reopening: s-3 gets its own back, the released one is
	// free again, a taken one is refused.
	clock.set(t1.Add(time.Second))
	s3 := boltInstance("ZEEBE-SHARDS", "s-3", nil)
	must(r2.Register("ZEEBE-SHARDS", s3))
	if s3.Metadata[registryapi.MetaSlot] != "3" {
		t.Errorf("s-3 re-registered after reopening: slot %s, want its own 3", s3.Metadata[registryapi.MetaSlot])
	}
	s5 := boltInstance("ZEEBE-SHARDS", "s-5", nil)
	must(r2.Register("ZEEBE-SHARDS", s5))
	if s5.Metadata[registryapi.MetaSlot] != "1" {
		t.Errorf("new shard after reopening: slot %s, want 1 (released by s-1)", s5.Metadata[registryapi.MetaSlot])
	}
	if err := r2.Register("ZEEBE-SHARDS", boltInstance("ZEEBE-SHARDS", "s-6", map[string]string{registryapi.MetaSlot: "7"})); !errors.Is(err, registryapi.ErrConflict) {
		t.Errorf("new shard asking for s-4's slot 7 after reopening: %v, want a conflict", err)
	}
	d3, err := r2.AppendDeployment(ledger.Deployment{Resources: []ledger.Resource{{Name: "c.bpmn", Content: []byte("<c/>")}}})
	if err != nil || d3.Seq != 3 {
		t.Errorf("append after reopening: seq %d, %v; want 3", d3.Seq, err)
	}

	// Leases started again at the reopening: a full duration from t1.
	clock.set(t1.Add(29 * time.Second))
	if n := r2.Evict(); n != 0 {
		t.Errorf("evicted %d instances 29s after reopening; their 30s leases started again", n)
	}
	clock.set(t1.Add(32 * time.Second))
	if n := r2.Evict(); n != 6 { // o-1, p-1, s-2, s-3, s-4, s-5; not the static o-2
		t.Errorf("evicted %d instances 32s after reopening, want 6 (all but the static o-2)", n)
	}
	left := r2.Instances("")
	if len(left) != 1 || left[0].InstanceID != "o-2" {
		var ids []string
		for _, in := range left {
			ids = append(ids, in.InstanceID)
		}
		t.Errorf("left after the leases ended: %v, want the static o-2 only", ids)
	}
}

// ---------------------------------------------------------------------------
// TestBoltStoreCorruptOrLocked: a file that cannot be used gives an error
// that names it, not a panic.
// ---------------------------------------------------------------------------

// boltOpenNoPanic opens a store as `registry serve` does (store, then
// registry), turning a panic or a memory fault into a value.
func boltOpenNoPanic(path string) (panicked any, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if v := recover(); v != nil {
			panicked = fmt.Sprintf("%v\n%s", v, debug.Stack())
		}
	}()
	s, err := New(Config{Listen: "127.0.0.1:0", Store: "bolt:" + path})
	if err != nil {
		return nil, err
	}
	return nil, s.Registry().Close()
}

func TestBoltStoreCorruptOrLocked(t *testing.T) {
	t.Parallel() // the locked case waits out bbolt's lock timeout (2 s)
	dir := t.TempDir()

	t.Run("locked", func(t *testing.T) {
		path := filepath.Join(dir, "locked.db")
		first, err := store.OpenBoltStore(path)
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		start := time.Now()
		second, err := store.OpenBoltStore(path)
		took := time.Since(start)
		if err == nil {
			second.Close()
			t.Fatal("a second store.OpenBoltStore of an open file succeeded")
		}
		t.Logf("second open, after %v: %v", took.Round(time.Millisecond), err)
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name the file %s", err, path)
		}
		if !errors.Is(err, bolterrors.ErrTimeout) {
			t.Errorf("error %q: want bbolt's timeout", err)
		}
		if took > budget.Of(10*time.Second) {
			t.Errorf("the second open took %v to give up", took)
		}
		// The first holder is unharmed, and the file opens once it lets go.
		if err := first.Apply(store.Batch{Slots: map[registryapi.InstanceRef]int{{App: "ZEEBE-SHARDS", ID: "s-1"}: 1}}); err != nil {
			t.Errorf("first store after the second open failed: %v", err)
		}
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		again, err := store.OpenBoltStore(path)
		if err != nil {
			t.Fatalf("open after the first closed: %v", err)
		}
		st, err := again.Load()
		again.Close()
		if err != nil || st.Slots[registryapi.InstanceRef{App: "ZEEBE-SHARDS", ID: "s-1"}] != 1 {
			t.Errorf("reopened after the lock: slots %v, %v", st.Slots, err)
		}
	})

	garbage := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	// A real registry file, for the cases that damage one.
	real := filepath.Join(dir, "real.db")
	func() {
		clock := &boltClock{now: time.Now()}
		r := boltOpenRegistry(t, real, clock)
		defer r.Close()
		for i := range 300 {
			if err := r.Register("ORDERS", boltInstance("ORDERS", fmt.Sprintf("o-%d", i), map[string]string{"pad": strings.Repeat("x", 200)})); err != nil {
				t.Fatal(err)
			}
		}
	}()
	realBytes, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		make func(path string) error
		want string // in the error, besides the file's name
	}{
		{"garbage", func(p string) error { return os.WriteFile(p, garbage, 0o600) }, "invalid"},
		{"text", func(p string) error { return os.WriteFile(p, []byte("not a bolt file\n"), 0o600) }, ""},
		{"bad-record", func(p string) error {
			db, err := bolt.Open(p, 0o600, nil)
			if err != nil {
				return err
			}
			defer db.Close()
			return db.Update(func(tx *bolt.Tx) error {
				// "instances" is the bolt store's bucket of instances, keyed app NUL id.
				b, err := tx.CreateBucketIfNotExists([]byte("instances"))
				if err != nil {
					return err
				}
				return b.Put([]byte("ORDERS\x00o-1"), []byte("{not json"))
			})
		}, `instance "ORDERS\x00o-1"`},
		{"truncated", func(p string) error { return os.WriteFile(p, realBytes[:len(realBytes)/2], 0o600) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".db")
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			panicked, err := boltOpenNoPanic(path)
			if panicked != nil {
				t.Fatalf("opening a %s file panicked instead of returning an error:\n%v", tc.name, panicked)
			}
			if err == nil {
				t.Fatalf("opening a %s file succeeded", tc.name)
			}
			t.Logf("error: %v", err)
			// A bad record is named by its key; the file, by its path.
			if tc.name != "bad-record" && !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file %s", err, path)
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want it to say %q", err, tc.want)
			}
		})
	}
}
