//go:build long

package registry

// Failover, measured: three `registry serve` processes, each with an
// embedded etcd member, as an operator runs them.
//
//   - TestKillCoordinatorUnderRegistrations: SIGKILL of the coordinator
//     (made etcd's raft leader first: the worst case, two elections at
//     once) under an open-loop registration load at half the measured
//     rate, with hudl/fargo and eureka-js-client pointed at all three
//     replicas. Registrations resume on the survivors within the session
//     TTL + 2 s and do not stop again, no survivor holds a registration
//     for etcd's timeout, no acknowledged registration is lost, the
//     clients recover with their own retry.
//   - TestPausedCoordinatorIsFenced: SIGSTOP of the coordinator for longer
//     than its session: another takes over; the paused one, woken, steps
//     down and evicts nothing (a watch of etcd would see its delete).
//   - TestRestartAllReplicas: every registration and the cutover record
//     are back after all three stop (SIGTERM, then SIGKILL) and start again.
//
// The figures go to the test log: make bench-registry-failover greps them.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hudl/fargo"
	logging "github.com/op/go-logging"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/npmtest"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/registry/store"
)

// replicaSet is three `registry serve` processes with embedded etcd
// members on ports fixed at the first start: one started again on its
// data directory rejoins its member, and serves where clients point.
type replicaSet struct {
	t     *testing.T
	bin   string
	args  map[string][]string
	procs map[string]*proctest.Process
	bases map[string]string // http://127.0.0.1:PORT
	etcd  map[string]string // each member's client URL
}

func startReplicaSet(t *testing.T, extra ...string) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, bin: proctest.Build(t), args: map[string][]string{}, procs: map[string]*proctest.Process{},
		bases: map[string]string{}, etcd: map[string]string{}}
	dir := t.TempDir()
	cluster := initialCluster(t, replicaIDs)
	for _, id := range replicaIDs {
		listen := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
		rs.bases[id] = "http://" + listen
		rs.etcd[id] = fmt.Sprintf("http://127.0.0.1:%d", proctest.FreePort(t))
		rs.args[id] = append([]string{"registry", "serve", "--listen", listen, "--id", id,
			"--embedded-etcd", filepath.Join(dir, id), "--initial-cluster", cluster, "--etcd-client-url", rs.etcd[id],
			"--eviction-interval", "250ms", "--self-preservation=false", "--log-format", "json"}, extra...)
	}
	rs.startAll()
	return rs
}

// start runs replica id (again) with the arguments of its first start.
func (rs *replicaSet) start(id string) {
	rs.t.Helper()
	p := proctest.Start(rs.t, rs.bin, nil, rs.args[id]...)
	if got := "http://" + p.Addr; got != rs.bases[id] {
		rs.t.Fatalf("replica %s listens on %s, want %s", id, got, rs.bases[id])
	}
	rs.procs[id] = p
}

// startAll starts the three and waits until each is ready, sees the
// others and names a coordinator; it returns how long that took.
func (rs *replicaSet) startAll() time.Duration {
	rs.t.Helper()
	began := time.Now()
	for _, id := range replicaIDs {
		rs.start(id)
	}
	waitReplicasReady(rs.t, rs.bases)
	return time.Since(began)
}

// others are the replicas but id.
func others(id string) []string {
	var ids []string
	for _, o := range replicaIDs {
		if o != id {
			ids = append(ids, o)
		}
	}
	return ids
}

// newFailoverHTTP is a client for loads against replicas that die: a
// refused connection fails at once, connections are reused, and no more
// than 200 per replica are opened (the race detector counts goroutines).
func newFailoverHTTP(t *testing.T) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConns:        600,
		MaxIdleConnsPerHost: 200,
		MaxConnsPerHost:     200,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: budget.Of(15 * time.Second)}
}

// agreedCoordinator is the coordinator every replica of ids names, one of
// them, which knows it is; "" while they do not agree.
func agreedCoordinator(c *http.Client, bases map[string]string, ids []string) string {
	coord := ""
	for _, id := range ids {
		st, _, _, err := readyzQuiet(c, bases[id])
		if err != nil || st.Coordinator == "" || (coord != "" && st.Coordinator != coord) {
			return ""
		}
		coord = st.Coordinator
	}
	if !slices.Contains(ids, coord) {
		return ""
	}
	for _, id := range ids {
		if st, _, _, _ := readyzQuiet(c, bases[id]); st.IsCoordinator != (id == coord) {
			return ""
		}
	}
	return coord
}

func waitAgreedCoordinator(t *testing.T, c *http.Client, rs *replicaSet, ids []string) string {
	t.Helper()
	var coord string
	budget.Eventually(t, 20*time.Second, "the replicas "+strings.Join(ids, ", ")+" agree on a coordinator", func() bool {
		coord = agreedCoordinator(c, rs.bases, ids)
		return coord != ""
	})
	return coord
}

// moveEtcdLeader makes replica to's etcd member the raft leader, so that
// stopping the replica stops the leader too: the slowest failover, a raft
// election before the registry's own. It says whether it had to move it.
func moveEtcdLeader(t *testing.T, rs *replicaSet, to string) bool {
	t.Helper()
	ctx := budget.Context(t, 20*time.Second)
	members, leaderOf := map[string]uint64{}, map[string]uint64{}
	for _, id := range replicaIDs {
		cli := openEtcd(t, rs.etcd[id])
		st, err := cli.Client.Status(ctx, rs.etcd[id])
		if err != nil {
			t.Fatalf("etcd status of %s: %v", id, err)
		}
		members[id], leaderOf[id] = st.Header.MemberId, st.Leader
	}
	if leaderOf[to] == members[to] {
		return false
	}
	var leader string
	for id, m := range members {
		if m == leaderOf[to] {
			leader = id
		}
	}
	if leader == "" {
		t.Fatalf("no etcd member is the leader %x that %s names", leaderOf[to], to)
	}
	cli := openEtcd(t, rs.etcd[leader])
	if _, err := cli.Client.MoveLeader(ctx, members[to]); err != nil {
		t.Fatalf("move etcd's leadership from %s to %s: %v", leader, to, err)
	}
	target := openEtcd(t, rs.etcd[to])
	budget.Eventually(t, 10*time.Second, to+"'s etcd member leads", func() bool {
		st, err := target.Client.Status(ctx, rs.etcd[to])
		return err == nil && st.Leader == members[to]
	})
	return true
}

// missingOn waits (budget.Of limit at most) until a replica serves every
// id of want in app, and returns those it still lacks then.
func missingOn(t *testing.T, c *http.Client, base, app string, want []string, limit time.Duration) []string {
	t.Helper()
	var missing []string
	_ = budget.Wait(budget.Of(limit), func() bool {
		have, err := appIDs(c, base, app)
		if err != nil {
			missing = []string{err.Error()}
			return false
		}
		missing = missing[:0]
		for _, id := range want {
			if !have[id] {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0
	})
	return missing
}

func firstFew(s []string) string {
	if len(s) > 10 {
		return strings.Join(s[:10], ", ") + fmt.Sprintf(", … (%d in all)", len(s))
	}
	return strings.Join(s, ", ")
}

// logsSince are the JSON log lines a process wrote from line from on.
func logsSince(p *proctest.Process, from int) []map[string]any {
	var out []map[string]any
	for i, line := range strings.Split(p.Stderr(), "\n") {
		if i < from || !strings.HasPrefix(line, "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func lineCount(p *proctest.Process) int { return len(strings.Split(p.Stderr(), "\n")) }

// logsSincePause are the log lines of every replica since froms that
// mention any of words, each with the replica's id.
func (rs *replicaSet) logsSincePause(froms map[string]int, words ...string) string {
	var b strings.Builder
	for _, id := range replicaIDs {
		for i, line := range strings.Split(rs.procs[id].Stderr(), "\n") {
			if i < froms[id] {
				continue
			}
			for _, w := range words {
				if strings.Contains(line, w) {
					fmt.Fprintf(&b, "  %s: %s\n", id, line)
					break
				}
			}
		}
	}
	return b.String()
}

// --- the registration load ---

// regAttempt is one POST of a registration to one replica.
type regAttempt struct {
	id         string
	via        string
	start, end time.Time
	code       int // 0: no answer
	err        string
}

// regLoad registers instances of app, each with its own id and a long
// lease, as a Eureka client does: round-robin over the replicas, and a
// failure (no answer, 5xx) tried again at once on the next replica, after
// a pause once every replica failed.
type regLoad struct {
	c     *http.Client
	bases map[string]string
	app   string
	next  atomic.Int64

	inflight atomic.Int64
	skipped  atomic.Int64
	wg       sync.WaitGroup

	mu       sync.Mutex
	attempts []regAttempt
	acked    map[string]time.Time // id → when its 204 came
	refused  []string             // a 4xx: not an outage, a fault
	gaveUp   []string
}

const maxLoadInflight = 3000

func newRegLoad(c *http.Client, bases map[string]string, app string) *regLoad {
	return &regLoad{c: c, bases: bases, app: app, acked: map[string]time.Time{}}
}

func (l *regLoad) register(n int) {
	id := fmt.Sprintf("r-%06d", n)
	body := fmt.Sprintf(leaseJSON, id, l.app, 600, "")
	for a := 0; a < 3*len(replicaIDs); a++ {
		if a > 0 && a%len(replicaIDs) == 0 {
			time.Sleep(time.Duration(a/len(replicaIDs)) * 500 * time.Millisecond)
		}
		via := replicaIDs[(n+a)%len(replicaIDs)]
		at := regAttempt{id: id, via: via, start: time.Now()}
		code, resp, err := send(l.c, "POST", l.bases[via]+"/eureka/apps/"+l.app, jsonHeader, body)
		at.end, at.code = time.Now(), code
		if err != nil {
			at.err = err.Error()
		} else if code != http.StatusNoContent {
			at.err = strings.TrimSpace(resp)
		}
		l.mu.Lock()
		l.attempts = append(l.attempts, at)
		switch {
		case code == http.StatusNoContent:
			l.acked[id] = at.end
		case err == nil && code < 500:
			l.refused = append(l.refused, fmt.Sprintf("%s via %s: %d %s", id, via, code, at.err))
		}
		l.mu.Unlock()
		if code == http.StatusNoContent || (err == nil && code < 500) {
			return
		}
	}
	l.mu.Lock()
	l.gaveUp = append(l.gaveUp, id)
	l.mu.Unlock()
}

// closed registers with workers at a time for d and returns the rate
// acknowledged.
func (l *regLoad) closed(workers int, d time.Duration) float64 {
	l.mu.Lock()
	before := len(l.acked)
	l.mu.Unlock()
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for time.Since(start) < d {
				l.register(int(l.next.Add(1)))
			}
		})
	}
	wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return float64(len(l.acked)-before) / time.Since(start).Seconds()
}

// open starts registrations at rate per second, each in its own
// goroutine whatever the answers take (an open loop), until stop; a start
// while maxLoadInflight are unanswered is skipped, and counted.
func (l *regLoad) open(rate float64, stop <-chan struct{}) {
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; ; i++ {
		if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
			timer.Reset(d)
			select {
			case <-stop:
				return
			case <-timer.C:
			}
		} else {
			select {
			case <-stop:
				return
			default:
			}
		}
		if l.inflight.Load() >= maxLoadInflight {
			l.skipped.Add(1)
			continue
		}
		l.inflight.Add(1)
		l.wg.Go(func() {
			defer l.inflight.Add(-1)
			l.register(int(l.next.Add(1)))
		})
	}
}

// ackedIDs is every id answered 204, sorted.
func (l *regLoad) ackedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.acked))
	for id := range l.acked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// failover is what the load saw of a kill at killAt until end: how soon
// a registration sent after it was acknowledged by a survivor, the longest
// time without any acknowledgement, and the failed attempts.
type failover struct {
	resume, stall time.Duration
	stallFrom     time.Duration // after the kill
	// wait is the longest a survivor kept an attempt sent after the kill
	// unanswered, and waitFrom when that attempt was sent.
	wait, waitFrom        time.Duration
	errors, errorsAfter   int
	byVictim, bySurvivors int
	sample                []string
}

func (l *regLoad) failover(killAt, end time.Time, victim string) failover {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := failover{resume: -1}
	var acks []time.Time
	for _, a := range l.attempts {
		if !a.start.Before(killAt) && a.via != victim && a.end.Sub(a.start) > f.wait {
			f.wait, f.waitFrom = a.end.Sub(a.start), a.start.Sub(killAt)
		}
		if a.code == http.StatusNoContent {
			if !a.end.Before(killAt) && !a.end.After(end) {
				acks = append(acks, a.end)
			}
			if !a.start.Before(killAt) && a.via != victim && (f.resume < 0 || a.end.Sub(killAt) < f.resume) {
				f.resume = a.end.Sub(killAt)
			}
			continue
		}
		f.errors++
		if a.end.Before(killAt) {
			continue
		}
		f.errorsAfter++
		if a.via == victim {
			f.byVictim++
		} else {
			f.bySurvivors++
			if len(f.sample) < 5 {
				f.sample = append(f.sample, fmt.Sprintf("%s via %s at kill+%v: %d %s", a.id, a.via, a.end.Sub(killAt).Round(time.Millisecond), a.code, a.err))
			}
		}
	}
	sort.Slice(acks, func(i, j int) bool { return acks[i].Before(acks[j]) })
	prev := killAt
	for _, at := range append(acks, end) {
		if at.Sub(prev) > f.stall {
			f.stall, f.stallFrom = at.Sub(prev), prev.Sub(killAt)
		}
		prev = at
	}
	return f
}

// --- the clients' side ---

// clientEvent is one thing a Eureka client did: a request's final
// answer, or an attempt it retried.
type clientEvent struct {
	at     time.Time
	id     string // the instance
	op     string // register, heartbeat, retry, start-failed
	ok     bool
	code   int
	detail string
}

// clientTally collects a client's events.
type clientTally struct {
	mu     sync.Mutex
	events []clientEvent
}

func (c *clientTally) add(e clientEvent) {
	c.mu.Lock()
	c.events = append(c.events, e)
	c.mu.Unlock()
}

func (c *clientTally) all() []clientEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

// waitFor waits until an event satisfies ok.
func (c *clientTally) waitFor(t *testing.T, what string, limit time.Duration, ok func(clientEvent) bool) {
	t.Helper()
	budget.Eventually(t, limit, what, func() bool { return slices.ContainsFunc(c.all(), ok) })
}

// trace is what happened to the instances ids, as times after the kill.
func (c *clientTally) trace(ids []string, killAt time.Time) string {
	var b strings.Builder
	for _, id := range ids[:min(len(ids), 3)] {
		fmt.Fprintf(&b, "  %s:", id)
		for _, e := range c.all() {
			if e.id != id {
				continue
			}
			fmt.Fprintf(&b, " %s", e.op)
			if !e.ok {
				fmt.Fprintf(&b, "(%d %s)", e.code, e.detail)
			}
			fmt.Fprintf(&b, "@%v", e.at.Sub(killAt).Round(time.Millisecond))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// clientSummary: errors seen (failed requests and retried attempts),
// those after the kill, 404s to heartbeats, the instances registered, and
// those not recovered: no successful heartbeat after the kill, or a run
// without a successful heartbeat (or registration) as long as their lease
// after the kill; gap is the longest such run.
type clientSummary struct {
	errors, errorsAfter, notFound int
	registered                    []string
	unrecovered                   []string
	gap                           time.Duration
	lastErrorAfterKill            time.Duration
	sample                        []string
}

func (c *clientTally) summary(killAt, checkAt time.Time, lease time.Duration) clientSummary {
	var s clientSummary
	good, registered, beatAfter := map[string][]time.Time{}, map[string]bool{}, map[string]bool{}
	var order []string
	for _, e := range c.all() {
		if _, seen := registered[e.id]; !seen {
			registered[e.id] = false
			order = append(order, e.id)
		}
		if e.ok {
			registered[e.id] = registered[e.id] || e.op == "register"
			good[e.id] = append(good[e.id], e.at)
			if e.op == "heartbeat" && e.at.After(killAt) {
				beatAfter[e.id] = true
			}
			continue
		}
		s.errors++
		if e.op == "heartbeat" && e.code == http.StatusNotFound {
			s.notFound++
		}
		if e.at.After(killAt) {
			s.errorsAfter++
			s.lastErrorAfterKill = max(s.lastErrorAfterKill, e.at.Sub(killAt))
			if len(s.sample) < 4 {
				s.sample = append(s.sample, fmt.Sprintf("%s %s at kill+%v: %d %s", e.id, e.op, e.at.Sub(killAt).Round(time.Millisecond), e.code, e.detail))
			}
		}
	}
	for _, id := range order {
		if !registered[id] {
			s.unrecovered = append(s.unrecovered, id)
			continue
		}
		s.registered = append(s.registered, id)
		// From the last renewal before the kill (or the registration),
		// each run to the next, and the last to the check.
		times := append(good[id], checkAt)
		from := 0
		for i, at := range times[:len(times)-1] {
			if !at.After(killAt) {
				from = i
			}
		}
		gap := time.Duration(0)
		for i := from + 1; i < len(times); i++ {
			gap = max(gap, times[i].Sub(times[i-1]))
		}
		s.gap = max(s.gap, gap)
		if !beatAfter[id] || gap >= lease {
			s.unrecovered = append(s.unrecovered, id)
		}
	}
	return s
}

// clientLease is the lease of the clients' instances.
const clientLease = 10 * time.Second

// fargoRun is applications that each register one instance with
// hudl/fargo and heartbeat it.
type fargoRun struct {
	tally               *clientTally
	held                atomic.Bool
	started, registered atomic.Int64
	quit                chan struct{}
	wg                  sync.WaitGroup
	once                sync.Once
}

// runFargo drives hudl/fargo 1.4.0 pointed at every replica, as its
// README has it (fargo.NewConn takes the service URLs): one application
// more every second, up to most, until hold, each with its own connection
// and instance, which it registers (trying again every 500 ms until that
// works) and then heartbeats every 500 ms, registering again on a 404 as
// Eureka clients do. fargo's own retry: each request goes to a service
// URL picked at random, and a temporary network error is tried again on
// the same URL up to three times; a call that failed is tried again by the
// application, at a URL picked again.
func runFargo(t *testing.T, rs *replicaSet, app string, most int) *fargoRun {
	t.Helper()
	logging.SetLevel(logging.CRITICAL, "fargo")
	var urls []string
	for _, id := range replicaIDs {
		urls = append(urls, rs.bases[id]+"/eureka")
	}
	f := &fargoRun{tally: &clientTally{}, quit: make(chan struct{})}
	instance := func(id string) {
		conn := fargo.NewConn(urls...)
		conn.UseJson = true
		ins := &fargo.Instance{
			InstanceId: id, HostName: id + ".local", App: app, IPAddr: "10.0.0.9", VipAddress: strings.ToLower(app),
			Status: fargo.UP, Port: 8080, PortEnabled: true, DataCenterInfo: fargo.DataCenterInfo{Name: fargo.MyOwn},
			LeaseInfo: fargo.LeaseInfo{RenewalIntervalInSecs: 1, DurationInSecs: int32(clientLease / time.Second)},
		}
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		registered := false
		for {
			if !registered {
				err := conn.RegisterInstance(ins)
				f.tally.add(fargoEvent(id, "register", err))
				if registered = err == nil; registered {
					f.registered.Add(1)
				}
			} else {
				err := conn.HeartBeatInstance(ins)
				f.tally.add(fargoEvent(id, "heartbeat", err))
				if code, ok := fargo.HTTPResponseStatusCode(err); ok && code == http.StatusNotFound {
					f.tally.add(fargoEvent(id, "register", conn.ReregisterInstance(ins)))
				}
			}
			select {
			case <-f.quit:
				return
			case <-tick.C:
			}
		}
	}
	f.wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for n := 1; n <= most && !f.held.Load(); n++ {
			f.started.Add(1)
			f.wg.Go(func() { instance(fmt.Sprintf("fargo-%d", n)) })
			select {
			case <-f.quit:
				return
			case <-tick.C:
			}
		}
	})
	t.Cleanup(f.stop)
	return f
}

// hold starts no more applications.
func (f *fargoRun) hold() { f.held.Store(true) }

// settled says whether every application started has registered.
func (f *fargoRun) settled() bool { return f.registered.Load() == f.started.Load() }

func (f *fargoRun) stop() { f.once.Do(func() { close(f.quit); f.wg.Wait() }) }

func fargoEvent(id, op string, err error) clientEvent {
	e := clientEvent{at: time.Now(), id: id, op: op, ok: err == nil}
	if err != nil {
		e.code, _ = fargo.HTTPResponseStatusCode(err)
		e.detail = err.Error()
	}
	return e
}

// jsRun is testdata/eurekajs/failover.js under node.
type jsRun struct {
	*nodeProc
	tally *clientTally
}

// runEurekaJS starts eureka-js-client instances pointed at urls (in that
// order: the client starts with the first, and turns to the next on a
// failure), one more every second.
func runEurekaJS(t *testing.T, urls []string, app string) *jsRun {
	t.Helper()
	modules := npmtest.Modules(t, eurekaJSPackage, eurekaJSVersion)
	script, err := filepath.Abs(filepath.Join("testdata", "eurekajs", "failover.js"))
	if err != nil {
		t.Fatal(err)
	}
	opts := map[string]any{"serviceUrls": urls, "app": app, "heartbeatInterval": 500, "leaseSecs": int(clientLease / time.Second),
		"spawnEvery": 1000, "spawnMax": 60}
	ctx, cancel := context.WithCancel(context.Background())
	r := &jsRun{tally: &clientTally{}}
	r.nodeProc = startNode(t, ctx, cancel, modules, script, opts, func(b []byte) {
		var e struct {
			Step, ID, URL, Error, Level, Msg string
			Status                           int
		}
		if json.Unmarshal(b, &e) != nil {
			return
		}
		ev := clientEvent{at: time.Now(), id: e.ID, code: e.Status, detail: e.Error}
		switch e.Step {
		case "register":
			ev.op, ev.ok = "register", e.Status == http.StatusNoContent
		case "renew":
			ev.op, ev.ok = "heartbeat", e.Status == http.StatusOK
		case "retry":
			ev.op, ev.detail = "retry", "attempt failed on "+e.URL
		case "start-failed":
			ev.op = "start-failed"
		case "timeout":
			ev.op, ev.detail = "timeout", "failover.js gave up"
		default:
			return
		}
		r.tally.add(ev)
	}, func() {})
	return r
}

// settled says whether every client started has registered.
func (r *jsRun) settled() bool {
	registered := map[string]bool{}
	for _, e := range r.tally.all() {
		registered[e.id] = registered[e.id] || (e.op == "register" && e.ok)
	}
	for _, ok := range registered {
		if !ok {
			return false
		}
	}
	return true
}

// hold stops the script starting more clients.
func (r *jsRun) hold(t *testing.T) {
	if _, err := io.WriteString(r.stdin, "hold\n"); err != nil {
		t.Errorf("write to node: %v", err)
	}
}

// TestKillCoordinatorUnderRegistrations: SIGKILL of the coordinator (and
// of etcd's raft leader, moved to it first) under a registration load at
// half the rate measured: registrations resume on the survivors within
// the session TTL + 2 s, and the longest time without an
// acknowledgement ends within it too (they do not stop again); no
// survivor keeps an attempt waiting EtcdTimeout (the writes etcd lost
// with its leader are answered at the election); every
// registration acknowledged before, during and after the kill is on both
// survivors, and on the killed replica once it is back; fargo and
// eureka-js-client, pointed at all three replicas, keep registering and
// renewing with their own retry.
func TestKillCoordinatorUnderRegistrations(t *testing.T) {
	const ttl = 4 * time.Second
	const app = "FAILOVER"
	rs := startReplicaSet(t, "--session-ttl", ttl.String())
	hc := newFailoverHTTP(t)
	victim := waitAgreedCoordinator(t, hc, rs, replicaIDs)
	if moveEtcdLeader(t, rs, victim) {
		t.Logf("etcd leader moved to %s, the coordinator", victim)
	} else {
		t.Logf("etcd leader is %s, the coordinator, already", victim)
	}

	// The clients. eureka-js-client starts with the first URL and keeps
	// to it until a request fails: the coordinator's, so that the kill
	// reaches it.
	fg := runFargo(t, rs, "FARGOFAILOVER", 40)
	jsURLs := []string{rs.bases[victim] + "/eureka/apps/"}
	for _, id := range others(victim) {
		jsURLs = append(jsURLs, rs.bases[id]+"/eureka/apps/")
	}
	js := runEurekaJS(t, jsURLs, "JSFAILOVER")
	fg.tally.waitFor(t, "fargo's first heartbeat", 20*time.Second, func(e clientEvent) bool { return e.op == "heartbeat" && e.ok })
	js.tally.waitFor(t, "eureka-js-client's first heartbeat", 20*time.Second, func(e clientEvent) bool { return e.op == "heartbeat" && e.ok })

	// The bound is the issue's, TTL + 2 s: what it measures is etcd's
	// and the registry's timeouts, not the machine's speed, so it is not
	// stretched by budget.Of, only by $SHARDCTL_TEST_SLOWDOWN when set.
	bound := ttl + time.Duration(float64(2*time.Second)*budget.Declared())
	load := newRegLoad(hc, rs.bases, app)
	const workers = 20
	rate := load.closed(workers, 3*time.Second)
	if rate < 2 {
		t.Fatalf("measured %.1f registrations/s: too few to measure a failover with", rate)
	}
	target := rate / 2
	t.Logf("measured %.0f registrations/s (%d in flight, 3 s, round-robin over the replicas); open-loop load at %.0f/s", rate, workers, target)

	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		load.open(target, stopLoad)
	}()
	defer func() {
		select {
		case <-stopLoad:
		default:
			close(stopLoad)
		}
		<-loadDone
		load.wg.Wait()
	}()
	time.Sleep(3 * time.Second)
	if now := agreedCoordinator(hc, rs.bases, replicaIDs); now != victim {
		t.Fatalf("the coordinator moved from %s to %q under the load, before any kill", victim, now)
	}
	survivors := others(victim)

	rs.procs[victim].Kill()
	killAt := time.Now()
	t.Logf("killed coordinator %s (SIGKILL; its etcd member, the raft leader, with it)", victim)

	// The new coordinator, as both survivors see it.
	var heir string
	var takeover time.Duration
	deadline := killAt.Add(2*ttl + budget.Of(5*time.Second))
	for heir == "" && time.Now().Before(deadline) {
		heir = agreedCoordinator(hc, rs.bases, survivors)
		takeover = time.Since(killAt)
		time.Sleep(20 * time.Millisecond)
	}
	if heir == "" {
		t.Fatalf("no survivor coordinates %v after the kill", time.Since(killAt).Round(time.Millisecond))
	}

	// The load goes on past the election, then stops and is answered.
	loadFor := 12 * time.Second
	time.Sleep(time.Until(killAt.Add(loadFor)))
	close(stopLoad)
	<-loadDone
	loadEnd := time.Now()
	load.wg.Wait()

	f := load.failover(killAt, loadEnd, victim)
	t.Logf("election time: registrations resumed on the survivors %v after the kill (longest stall without an acknowledgement %v, from kill+%v; bound %v); coordinator %s took over %v after it",
		f.resume.Round(time.Millisecond), f.stall.Round(time.Millisecond), f.stallFrom.Round(time.Millisecond), bound.Round(time.Millisecond), heir, takeover.Round(time.Millisecond))
	t.Logf("load: %d failed attempts in all, %d after the kill (%d to %s, %d to the survivors), each tried again on the next replica; %d not started (%d in flight), %d given up after 9 attempts",
		f.errors, f.errorsAfter, f.byVictim, victim, f.bySurvivors, load.skipped.Load(), maxLoadInflight, len(load.gaveUp))
	if len(f.sample) > 0 {
		t.Logf("load: failures on the survivors after the kill, first ones: %s", strings.Join(f.sample, "; "))
	}
	if f.resume < 0 || f.resume > bound {
		t.Errorf("registrations resumed on the survivors %v after the kill; want within the session TTL + 2 s (%v)", f.resume, bound)
	}
	if until := f.stallFrom + f.stall; f.resume >= 0 && until > bound {
		// Resumed, then stopped again: a replica that reported itself cut
		// off from etcd once the next leader was elected.
		t.Errorf("no registration acknowledged from kill+%v to kill+%v: they stopped again past the session TTL + 2 s (%v)",
			f.stallFrom.Round(time.Millisecond), until.Round(time.Millisecond), bound)
	}
	t.Logf("writes in flight: a survivor kept an attempt waiting %v at most (one sent at kill+%v)", f.wait.Round(time.Millisecond), f.waitFrom.Round(time.Millisecond))
	if f.wait >= store.EtcdTimeout {
		// What etcd's member forwarded to the leader that died is lost
		// unanswered; the replica answers it when its member sees the
		// next leader, not at the timeout (replica/leader.go).
		t.Errorf("a survivor kept an attempt sent at kill+%v waiting %v: writes lost with the leader waited out EtcdTimeout (%v)",
			f.waitFrom.Round(time.Millisecond), f.wait.Round(time.Millisecond), store.EtcdTimeout)
	}
	if f.stall > bound {
		t.Errorf("no registration was acknowledged for %v after the kill; want at most the session TTL + 2 s (%v)", f.stall, bound)
	}
	if len(load.refused) > 0 {
		t.Errorf("%d registrations refused with a 4xx: %s", len(load.refused), firstFew(load.refused))
	}

	// Nothing acknowledged is lost: every 204 is on both survivors.
	acked := load.ackedIDs()
	lost := map[string]bool{}
	for _, r := range survivors {
		missing := missingOn(t, hc, rs.bases[r], app, acked, 10*time.Second)
		for _, id := range missing {
			lost[id] = true
		}
		if len(missing) > 0 {
			t.Errorf("%d acknowledged registrations missing on %s: %s", len(missing), r, firstFew(missing))
		}
	}
	t.Logf("registrations acknowledged %d, lost %d (checked on %s)", len(acked), len(lost), strings.Join(survivors, " and "))

	// The clients: a few more heartbeats on the survivors, then what they
	// saw, and their instances on both survivors.
	js.hold(t)
	fg.hold()
	budget.Eventually(t, 20*time.Second, "every client started has registered", func() bool { return fg.settled() && js.settled() })
	time.Sleep(2 * time.Second)
	checkAt := time.Now()
	for _, c := range []struct {
		name, app, retry string
		tally            *clientTally
	}{
		{"fargo", "FARGOFAILOVER", "a random service URL per request", fg.tally},
		{"eureka-js-client", "JSFAILOVER", "the next service URL on a failure, kept", js.tally},
	} {
		s := c.tally.summary(killAt, checkAt, clientLease)
		var absent []string
		for _, r := range survivors {
			for _, id := range missingOn(t, hc, rs.bases[r], c.app, s.registered, 5*time.Second) {
				absent = append(absent, id+" on "+r)
			}
		}
		recovered := "recovered"
		if len(s.unrecovered) > 0 || len(absent) > 0 {
			recovered = "NOT recovered"
		}
		t.Logf("%s: client errors seen %d (%d after the kill, the last %v after it; %d heartbeats answered 404; retry: %s), %s: %d instances registered, %d renewed after the kill, the longest without a renewal %v (lease %v), all on %s",
			c.name, s.errors, s.errorsAfter, s.lastErrorAfterKill.Round(time.Millisecond), s.notFound, c.retry, recovered,
			len(s.registered), len(s.registered)-len(s.unrecovered), s.gap.Round(time.Millisecond), clientLease, strings.Join(survivors, " and "))
		if len(s.sample) > 0 {
			t.Logf("%s: errors after the kill, first ones: %s", c.name, strings.Join(s.sample, "; "))
		}
		if len(s.unrecovered) > 0 {
			t.Errorf("%s: instances not registered, or not renewed after the kill, or left without a renewal for a lease: %s\n%s",
				c.name, firstFew(s.unrecovered), c.tally.trace(s.unrecovered, killAt))
		}
		if len(absent) > 0 {
			t.Errorf("%s: instances registered through the client missing: %s", c.name, firstFew(absent))
		}
		if len(s.registered) < 5 {
			t.Errorf("%s: only %d instances registered", c.name, len(s.registered))
		}
		if c.name == "eureka-js-client" && s.errorsAfter == 0 {
			t.Errorf("eureka-js-client saw no error after the kill, though it started on %s's URL: the failover did not reach it", victim)
		}
	}
	fg.stop()

	// The killed replica, started again on its data, has it all.
	began := time.Now()
	rs.start(victim)
	waitReplicasReady(t, rs.bases)
	missing := missingOn(t, hc, rs.bases[victim], app, acked, 10*time.Second)
	t.Logf("killed replica %s started again on its data: ready after %v, holds %d of the %d acknowledged registrations",
		victim, time.Since(began).Round(time.Millisecond), len(acked)-len(missing), len(acked))
	if len(missing) > 0 {
		t.Errorf("%d acknowledged registrations missing on %s after its restart: %s", len(missing), victim, firstFew(missing))
	}
}

// instanceEvent is a change of an instance key in etcd.
type instanceEvent struct {
	at      time.Time
	deleted bool
	key     string // app/id
	rev     int64
}

// watchInstances records every change of an instance key in etcd,
// through the members at urls, until the test ends.
func watchInstances(t *testing.T, urls []string) (events func() []instanceEvent) {
	t.Helper()
	cli := openEtcd(t, urls...)
	prefix := store.DefaultEtcdPrefix + store.KeyInstances
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var seen []instanceEvent
	// The watch starts at the current revision, so nothing is missed
	// between here and the first event.
	resp, err := cli.Client.Get(budget.Context(t, 10*time.Second), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	wch := cli.Client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for wr := range wch {
			mu.Lock()
			for _, ev := range wr.Events {
				seen = append(seen, instanceEvent{at: time.Now(), deleted: ev.Type == mvccpb.DELETE,
					key: strings.TrimPrefix(string(ev.Kv.Key), prefix), rev: ev.Kv.ModRevision})
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() []instanceEvent {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// TestPausedCoordinatorIsFenced: the coordinator (etcd's raft leader too)
// is stopped (SIGSTOP) for longer than its session; another takes over
// and evicts an instance left to expire (the control: a watch of etcd sees
// that delete); woken (SIGCONT), the paused one finds every lease it knew
// expired by its own clock, yet steps down and deletes nothing: no
// renewed instance is ever deleted in etcd, its log shows no eviction and
// says it is no longer coordinator, and all three name another one. (With
// etcd's leader gone, the others' sessions may end too, and the
// coordinator move again: that is logged, not failed.) Without the
// freshness checks of MayEvict and Write, the woken one deletes all 30
// renewed instances here, and the test fails on each count.
func TestPausedCoordinatorIsFenced(t *testing.T) {
	const ttl = 3 * time.Second
	const lease = 3 // seconds, of the renewed instances
	const n = 30
	const app = "FENCE"
	rs := startReplicaSet(t, "--session-ttl", ttl.String())
	hc := newFailoverHTTP(t)
	victim := waitAgreedCoordinator(t, hc, rs, replicaIDs)
	if moveEtcdLeader(t, rs, victim) {
		t.Logf("etcd leader moved to %s, the coordinator", victim)
	}
	if now := waitAgreedCoordinator(t, hc, rs, replicaIDs); now != victim {
		t.Fatalf("the coordinator moved from %s to %s with etcd's leader", victim, now)
	}
	live := others(victim)
	events := watchInstances(t, []string{rs.etcd[live[0]], rs.etcd[live[1]]})

	// n instances, registered and renewed twice a second through the two
	// others only: the coordinator learns of the renewals from them.
	var ids []string
	for i := range n {
		id := fmt.Sprintf("f-%02d", i)
		ids = append(ids, id)
		if code, body := registerLease(t, rs.bases[live[i%2]], app, id, lease, ""); code != http.StatusNoContent {
			t.Fatalf("register %s through %s: %d %s", id, live[i%2], code, body)
		}
	}
	var renewed, notFound, failed atomic.Int64
	var notFoundWhat sync.Map
	stopRenew := make(chan struct{})
	var renewing sync.WaitGroup
	renewing.Go(func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-stopRenew:
				return
			case <-tick.C:
			}
			for i, id := range ids {
				via := live[(i+k)%2]
				code, _, err := send(hc, "PUT", rs.bases[via]+"/eureka/apps/"+app+"/"+id, jsonHeader, "")
				switch {
				case err != nil:
					failed.Add(1)
				case code == http.StatusOK:
					renewed.Add(1)
				case code == http.StatusNotFound:
					notFound.Add(1)
					notFoundWhat.Store(id+" via "+via, true)
				default:
					failed.Add(1)
				}
			}
		}
	})
	defer func() {
		select {
		case <-stopRenew:
		default:
			close(stopRenew)
		}
		renewing.Wait()
	}()
	// Past a lease under the coordinator before it is paused.
	time.Sleep(time.Duration(lease)*time.Second + time.Second)
	evictedBefore := ejsStatus(t, rs.bases[victim]).Evicted
	froms := map[string]int{}
	for _, id := range replicaIDs {
		froms[id] = lineCount(rs.procs[id])
	}
	from := froms[victim]

	pid := rs.procs[victim].Cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	woken := false
	t.Cleanup(func() {
		if !woken {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	t.Logf("paused coordinator %s (SIGSTOP; its etcd member, the raft leader, with it)", victim)

	var heir string
	var takeover time.Duration
	budget.Eventually(t, 2*ttl+5*time.Second, "another replica coordinates", func() bool {
		heir, takeover = agreedCoordinator(hc, rs.bases, live), time.Since(stoppedAt)
		return heir != ""
	})
	t.Logf("takeover: %s coordinates %v after %s was paused (session TTL %v)", heir, takeover.Round(time.Millisecond), victim, ttl)

	// The control: an instance never renewed, which the new coordinator
	// must evict, and the watch must see go.
	controlAt := time.Now()
	budget.Eventually(t, 15*time.Second, "register the control", func() bool {
		code, _, err := send(hc, "POST", rs.bases[heir]+"/eureka/apps/"+app, jsonHeader, fmt.Sprintf(leaseJSON, "control", app, 2, ""))
		return err == nil && code == http.StatusNoContent
	})
	budget.Eventually(t, 15*time.Second, "the control's delete, seen in etcd", func() bool {
		return slices.ContainsFunc(events(), func(e instanceEvent) bool { return e.deleted && e.key == app+"/control" })
	})
	t.Logf("control: an instance with a 2 s lease, never renewed, registered through %s, deleted in etcd %v later",
		heir, time.Since(controlAt).Round(time.Millisecond))

	// Paused twice its session and a second, at least.
	time.Sleep(time.Until(stoppedAt.Add(2*ttl + time.Second)))
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	woken = true
	contAt := time.Now()
	pause := contAt.Sub(stoppedAt)

	// Woken, it steps down, and all three agree on a coordinator, not it:
	// the heir, or (reported) another one if the heir lost its session.
	var stepDown time.Duration
	var last registryapi.ReplicaStatus
	var lastErr error
	if err := budget.Wait(budget.Of(15*time.Second), func() bool {
		last, _, _, lastErr = readyzQuiet(hc, rs.bases[victim])
		stepDown = time.Since(contAt)
		return lastErr == nil && !last.IsCoordinator
	}); err != nil {
		t.Fatalf("%s, woken, still coordinates: %v; its /readyz: %+v (%v)\n%s", victim, err, last, lastErr, rs.logsSincePause(froms, "coordinator", "session"))
	}
	var now string
	if err := budget.Wait(budget.Of(15*time.Second), func() bool {
		now = agreedCoordinator(hc, rs.bases, replicaIDs)
		return now != "" && now != victim
	}); err != nil {
		var views []string
		for _, id := range replicaIDs {
			st, ready, _, err := readyzQuiet(hc, rs.bases[id])
			views = append(views, fmt.Sprintf("%s: %+v ready %v (%v)", id, st, ready, err))
		}
		t.Fatalf("after %s woke the replicas do not agree on a coordinator but it: %v\n%s\n%s", victim, err, strings.Join(views, "\n"), rs.logsSincePause(froms, "coordinator", "session"))
	}
	if now != heir {
		t.Logf("after %s woke, the coordinator moved from %s to %s; since the pause:\n%s", victim, heir, now, rs.logsSincePause(froms, "coordinator", "session", "lease not found", "leader changed"))
	}
	budget.Eventually(t, 15*time.Second, victim+" ready again", func() bool {
		_, ready, _, err := readyzQuiet(hc, rs.bases[victim])
		return err == nil && ready
	})
	readyAfter := time.Since(contAt)
	budget.Eventually(t, 10*time.Second, victim+"'s log says it no longer coordinates", func() bool {
		return slices.ContainsFunc(logsSince(rs.procs[victim], from), func(m map[string]any) bool {
			return m["msg"] == "replica no longer coordinator" && m["replica"] == victim
		})
	})
	var why any
	for _, m := range logsSince(rs.procs[victim], from) {
		if m["msg"] == "replica no longer coordinator" {
			why = m["reason"]
		}
	}
	t.Logf("woke %s after a pause of %v: it reported not coordinator %v later (its log: no longer coordinator, %v), ready again %v later; all three name %s coordinator",
		victim, pause.Round(time.Millisecond), stepDown.Round(time.Millisecond), why, readyAfter.Round(time.Millisecond), now)

	// Renewals go on well past the time it would need to evict (its view
	// fresh again for 2 digest intervals + the cutoff) and two leases.
	time.Sleep(time.Until(contAt.Add(4*time.Second + 2*time.Duration(lease)*time.Second)))
	close(stopRenew)
	renewing.Wait()

	var deletes, writes []string
	for _, e := range events() {
		if e.key == app+"/control" {
			continue
		}
		what := fmt.Sprintf("%s at revision %d, %v after the pause began", e.key, e.rev, e.at.Sub(stoppedAt).Round(time.Millisecond))
		if e.deleted {
			deletes = append(deletes, what)
		} else if e.at.After(stoppedAt) {
			writes = append(writes, what)
		}
	}
	var evictions []string
	for _, m := range logsSince(rs.procs[victim], from) {
		if m["msg"] == "lease expired, instance evicted" {
			evictions = append(evictions, fmt.Sprintf("%v/%v", m["app"], m["instance"]))
		}
	}
	evictedAfter := ejsStatus(t, rs.bases[victim]).Evicted
	t.Logf("fenced: %d renewals through %s, %d answered 404, %d failed; deletes in etcd of renewed instances %d; writes of them after the pause %d; evictions by %s after it woke %d (its count %d → %d)",
		renewed.Load(), strings.Join(live, " and "), notFound.Load(), failed.Load(), len(deletes), len(writes), victim, len(evictions), evictedBefore, evictedAfter)
	if len(deletes) > 0 {
		t.Errorf("renewed instances deleted in etcd (a coordinator evicted live leases): %s", firstFew(deletes))
	}
	if len(writes) > 0 {
		t.Errorf("renewed instances written in etcd after the pause, though nothing but renewals reached them: %s", firstFew(writes))
	}
	if len(evictions) > 0 || evictedAfter != evictedBefore {
		t.Errorf("%s evicted after it was paused: %d log lines (%s), count %d → %d", victim, len(evictions), firstFew(evictions), evictedBefore, evictedAfter)
	}
	if notFound.Load() > 0 {
		var what []string
		notFoundWhat.Range(func(k, _ any) bool { what = append(what, k.(string)); return true })
		sort.Strings(what)
		t.Errorf("%d renewals answered 404: %s", notFound.Load(), firstFew(what))
	}
	if renewed.Load() < int64(n) {
		t.Errorf("only %d renewals answered 200", renewed.Load())
	}
	for _, r := range replicaIDs {
		if missing := missingOn(t, hc, rs.bases[r], app, ids, 5*time.Second); len(missing) > 0 {
			t.Errorf("renewed instances missing on %s: %s", r, firstFew(missing))
		}
	}
}

// TestRestartAllReplicas: 200 registrations and a cutover record (leased)
// are back on every replica after all three stop and start again on their
// data and ports: first stopped with SIGTERM, then killed with SIGKILL.
func TestRestartAllReplicas(t *testing.T) {
	const n = 200
	const app = "KEEP"
	rs := startReplicaSet(t, "--session-ttl", "4s")
	hc := newFailoverHTTP(t)
	var ids []string
	for i := range n {
		id := fmt.Sprintf("k-%03d", i)
		ids = append(ids, id)
		via := replicaIDs[i%len(replicaIDs)]
		budget.Eventually(t, 10*time.Second, "register "+id+" through "+via, func() bool {
			code, body, err := send(hc, "POST", rs.bases[via]+"/eureka/apps/"+app, jsonHeader, fmt.Sprintf(leaseJSON, id, app, 3600, ""))
			if err == nil && code != http.StatusNoContent && code < 500 {
				t.Fatalf("register %s through %s: %d %s", id, via, code, body)
			}
			return err == nil && code == http.StatusNoContent
		})
	}
	ctx := budget.Context(t, 2*time.Minute)
	cc, err := registryclient.New(rs.bases["b"]+"/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	cut, err := cc.PutCutover(ctx, testCutover("blue-to-green"))
	if err != nil {
		t.Fatal(err)
	}
	cut.Phase, cut.Step, cut.Weights = registryapi.PhaseProgressing, 1, map[string]int{"blue": 90, "green": 10}
	if cut, err = cc.PutCutover(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if cut, err = cc.LeaseCutover(ctx, cut.Name, "apply-1", time.Hour, ""); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(cut)

	check := func(when string) {
		t.Helper()
		for _, r := range replicaIDs {
			if missing := missingOn(t, hc, rs.bases[r], app, ids, 10*time.Second); len(missing) > 0 {
				t.Fatalf("%s: %d registrations missing on %s: %s", when, len(missing), r, firstFew(missing))
			}
			rc, err := registryclient.New(rs.bases[r]+"/eureka", "")
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			budget.Eventually(t, 10*time.Second, when+": the cutover record on "+r, func() bool {
				c, err := rc.Cutover(ctx, cut.Name)
				got, _ = json.Marshal(c)
				return err == nil && string(got) == string(want)
			})
		}
	}
	check("before the restarts")

	for _, how := range []string{"SIGTERM", "SIGKILL"} {
		began := time.Now()
		switch how {
		case "SIGTERM": // all at once, as a rollout of every pod would
			for _, id := range replicaIDs {
				if err := rs.procs[id].Cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range replicaIDs {
				p := rs.procs[id]
				select {
				case <-p.Done():
					if err := p.Err(); err != nil {
						t.Errorf("%s after SIGTERM: %v\n%s", id, err, p.Stderr())
					}
				case <-time.After(budget.Of(20 * time.Second)):
					t.Fatalf("%s did not stop within %v of SIGTERM", id, budget.Of(20*time.Second).Round(time.Second))
				}
			}
		case "SIGKILL":
			for _, id := range replicaIDs {
				rs.procs[id].Kill()
			}
		}
		stopped := time.Since(began)
		ready := rs.startAll()
		check("after " + how)
		coord := waitAgreedCoordinator(t, hc, rs, replicaIDs)
		t.Logf("restart after %s of all three: stopped in %v, ready again in %v (coordinator %s); %d/%d registrations and the cutover record (version %d, %s, held by %s) back on %s",
			how, stopped.Round(time.Millisecond), ready.Round(time.Millisecond), coord, n, n, cut.Version, cut.Phase, cut.Holder, strings.Join(replicaIDs, ", "))
	}
}
