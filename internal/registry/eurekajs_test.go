package registry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/npmtest"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// The npm package TestEurekaJS runs, installed outside the repository.
const (
	eurekaJSPackage = "eureka-js-client"
	eurekaJSVersion = "4.5.0"
)

// TestEurekaJS drives the registry with eureka-js-client 4.5.0, the npm
// Eureka client, run by node from testdata/eurekajs/client.js: register,
// full fetch, deltas, heartbeats, re-registration on a 404, deregistration.
//
// What eureka-js-client 4.5.0 does, read from its lib/EurekaClient.js:
//   - register: POST {servicePath}{app} with {"instance": config.instance}
//     as it is (leaseInfo and metadata go along); only 204 is success.
//   - renew: a bare PUT {app}/{id} (no status, no lastDirtyTimestamp);
//     200 is success, 404 makes it register again.
//   - fetch: the first fetch is GET {servicePath} (full); with
//     shouldUseDelta (a top-level option, not under eureka) every later one
//     is GET {servicePath}delta. It never looks at apps__hashcode or
//     versions__delta and never falls back to a full fetch: a delta is
//     applied blindly by actionType, instances matched by hostName and
//     port.$.
//   - its delta code splices at index 0 whatever instance it matched
//     (modifyInstance and deleteInstance pass an array, which coerces to 0,
//     as splice's start), so the changes below touch only the first
//     instance of an app in the client's list; see the report of the test.
//
// client.js computes the hashcode a Java client would check after a delta
// over the client's copy; with filterUpInstances off the copy holds every
// instance, so it must equal the delta's apps__hashcode.
func TestEurekaJS(t *testing.T) {
	t.Parallel() // waits on node's timers
	modules := npmtest.Modules(t, eurekaJSPackage, eurekaJSVersion)
	script, err := filepath.Abs(filepath.Join("testdata", "eurekajs", "client.js"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		servicePath string
		// filterUp is the client's filterUpInstances: on (its default) it
		// drops non-UP instances from full fetches and ADDED deltas.
		filterUp bool
	}{
		{"netflix-path", "/eureka/v2/apps/", false},
		{"spring-path", "/eureka/apps/", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case has its registry and node process, and mostly
			// waits for the client's timers.
			t.Parallel()
			testEurekaJS(t, modules, script, tc.servicePath, tc.filterUp)
		})
	}
}

func testEurekaJS(t *testing.T, modules, script, servicePath string, filterUp bool) {
	_, base := startServer(t, Config{})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())

	// An instance the JS client did not register, there before it starts.
	if code, body := ejsDo(t, "POST", base+"/eureka/apps/ORDERS", ejsOrdersBody("orders-1", 8081)); code != http.StatusNoContent {
		t.Fatalf("register orders-1: %d %s", code, body)
	}

	n := ejsStart(t, modules, script, map[string]any{
		"port": port, "servicePath": servicePath, "filterUpInstances": filterUp, "watch": []string{"JSCLIENT", "ORDERS"},
	})

	// Register: a 204, the instance as the client described it.
	ev := n.wait(t, "the client registers", func(e ejsEvent) bool { return e.Step == "register" })
	if ev.Status != http.StatusNoContent {
		t.Fatalf("register answered %d (%s), want 204", ev.Status, ev.Error)
	}
	n.wait(t, "start() calls back", func(e ejsEvent) bool { return e.Step == "started" })
	js := ejsInstanceOf(t, base, "JSCLIENT", "js-1")
	if js == nil {
		t.Fatalf("GET /eureka/apps/JSCLIENT: no js-1 after the client registered")
	}
	if js.App != "JSCLIENT" || js.HostName != "js-1.local" || js.Status != "UP" || js.Port.Number != 3000 || js.Port.Enabled != "true" ||
		js.VIPAddress != "jsclient" || js.DataCenterInfo.Name != "MyOwn" || js.Metadata["zone"] != "a" ||
		js.LeaseInfo.RenewalIntervalInSecs != 1 || js.LeaseInfo.DurationInSecs != 10 {
		t.Errorf("the registry keeps the JS client's instance as %+v", js)
	}
	if h := ejsStatus(t, base); h.Instances != 2 {
		t.Errorf("status: %d instances, want 2", h.Instances)
	}

	// Full fetch: the client sees itself and orders-1.
	ev = n.waitFetch(t, "the first fetch", 0, func(apps map[string][]ejsSeen) bool {
		return ejsFind(apps, "JSCLIENT", "js-1") != nil && ejsFind(apps, "ORDERS", "orders-1") != nil
	})
	if ev.Kind != "full" || ev.Fulls != 1 {
		t.Errorf("the first fetch that saw both instances was a %s fetch (%d full so far), want the first full one", ev.Kind, ev.Fulls)
	}

	// Renew: heartbeats arrive and move the lease on.
	lastRenewal := js.LeaseInfo.LastRenewalTimestamp
	ev = n.wait(t, "two heartbeats", func(e ejsEvent) bool { return e.Step == "renew" && (e.Status != http.StatusOK || e.N >= 2) })
	if ev.Status != http.StatusOK {
		t.Fatalf("heartbeat %d answered %d (%s), want 200", ev.N, ev.Status, ev.Error)
	}
	ejsEventually(t, "lastRenewalTimestamp of js-1 moves on", func() (bool, string) {
		in := ejsInstanceOf(t, base, "JSCLIENT", "js-1")
		if in == nil {
			return false, "js-1 is gone"
		}
		return in.LeaseInfo.LastRenewalTimestamp > lastRenewal, fmt.Sprintf("lastRenewalTimestamp %d, registered at %d", in.LeaseInfo.LastRenewalTimestamp, lastRenewal)
	})

	// Deltas: each change made here must reach the client through a delta,
	// with no second full fetch. The client's list of ORDERS is [orders-1,
	// orders-2] from the first case on; changes go to orders-1, its first.
	for _, c := range []struct {
		name         string
		method, path string
		body         string
		code         int
		seen         func(apps map[string][]ejsSeen) bool
	}{
		{"a second instance registers", "POST", "/eureka/apps/ORDERS", ejsOrdersBody("orders-2", 8082), http.StatusNoContent,
			func(apps map[string][]ejsSeen) bool {
				o := ejsFind(apps, "ORDERS", "orders-2")
				return o != nil && o.Status == "UP" && ejsFind(apps, "ORDERS", "orders-1") != nil
			}},
		{"status override", "PUT", "/eureka/apps/ORDERS/orders-1/status?value=OUT_OF_SERVICE", "", http.StatusOK,
			func(apps map[string][]ejsSeen) bool {
				o := ejsFind(apps, "ORDERS", "orders-1")
				return o != nil && o.Status == "OUT_OF_SERVICE"
			}},
		{"override removed", "DELETE", "/eureka/apps/ORDERS/orders-1/status", "", http.StatusOK,
			func(apps map[string][]ejsSeen) bool {
				o := ejsFind(apps, "ORDERS", "orders-1")
				return o != nil && o.Status == "UP"
			}},
		{"metadata", "PUT", "/eureka/apps/ORDERS/orders-1/metadata?build=b42", "", http.StatusOK,
			func(apps map[string][]ejsSeen) bool {
				o := ejsFind(apps, "ORDERS", "orders-1")
				return o != nil && o.Metadata["build"] == "b42"
			}},
		{"cancel", "DELETE", "/eureka/apps/ORDERS/orders-1", "", http.StatusOK,
			func(apps map[string][]ejsSeen) bool {
				return ejsFind(apps, "ORDERS", "orders-1") == nil && ejsFind(apps, "ORDERS", "orders-2") != nil && len(apps["ORDERS"]) == 1
			}},
	} {
		if code, body := ejsDo(t, c.method, base+c.path, c.body); code != c.code {
			t.Fatalf("%s: %s %s answered %d %s, want %d", c.name, c.method, c.path, code, body, c.code)
		}
		h := ejsStatus(t, base)
		ev := n.waitFetch(t, c.name, h.Version, c.seen)
		if ev.Kind != "delta" || ev.Fulls != 1 {
			t.Errorf("%s: seen through a %s fetch, %d full fetches so far; want a delta and the one first full fetch", c.name, ev.Kind, ev.Fulls)
		}
		if ev.Hashcode != ev.Local {
			if filterUp {
				t.Logf("%s: delta apps__hashcode %q, the client's copy (UP only) counts %q", c.name, ev.Hashcode, ev.Local)
			} else {
				t.Errorf("%s: delta apps__hashcode %q, but the client's copy after applying it counts %q: a Java client would fetch everything again", c.name, ev.Hashcode, ev.Local)
			}
		}
		if full := ejsFullHashcode(t, base); ev.Version == strconv.FormatUint(h.Version, 10) && full != ev.Hashcode {
			t.Errorf("%s: at version %s the delta carries apps__hashcode %q, the full registry %q", c.name, ev.Version, ev.Hashcode, full)
		}
	}

	// 404 → register again: the registry forgets the client, whose next
	// heartbeat gets 404 and registers again.
	registered := ejsInstanceOf(t, base, "JSCLIENT", "js-1").LeaseInfo.RegistrationTimestamp
	if code, body := ejsDo(t, "DELETE", base+"/eureka/apps/JSCLIENT/js-1", ""); code != http.StatusOK {
		t.Fatalf("DELETE js-1: %d %s", code, body)
	}
	n.wait(t, "a heartbeat gets 404", func(e ejsEvent) bool { return e.Step == "renew" && e.Status == http.StatusNotFound })
	ev = n.wait(t, "the client registers again", func(e ejsEvent) bool { return e.Step == "register" })
	if ev.Status != http.StatusNoContent || ev.N < 2 {
		t.Fatalf("register #%d answered %d (%s), want #2 and 204", ev.N, ev.Status, ev.Error)
	}
	if !n.saw(func(e ejsEvent) bool { return e.Step == "log" && strings.Contains(e.Msg, "Re-registering") }) {
		t.Errorf("the client did not log that it registers again")
	}
	again := ejsInstanceOf(t, base, "JSCLIENT", "js-1")
	if again == nil || again.LeaseInfo.RegistrationTimestamp <= registered {
		t.Fatalf("after registering again js-1 is %+v, want registered after %d", again, registered)
	}
	ev = n.waitFetch(t, "the client sees itself again", ejsStatus(t, base).Version, func(apps map[string][]ejsSeen) bool {
		return ejsFind(apps, "JSCLIENT", "js-1") != nil
	})
	if ev.Fulls != 1 {
		t.Errorf("after registering again: %d full fetches, want only the first", ev.Fulls)
	}
	n.wait(t, "heartbeats go on", func(e ejsEvent) bool { return e.Step == "renew" && e.Status == http.StatusOK })

	// Deregister: stop() sends DELETE, the instance is gone.
	n.send(t, "stop")
	ev = n.wait(t, "stop() deregisters", func(e ejsEvent) bool { return e.Step == "deregister" })
	if ev.Status != http.StatusOK {
		t.Errorf("deregister answered %d (%s), want 200", ev.Status, ev.Error)
	}
	ev = n.wait(t, "stop() calls back", func(e ejsEvent) bool { return e.Step == "stopped" })
	if ev.Error != "" {
		t.Errorf("stop(): %s", ev.Error)
	}
	if code, body := ejsDo(t, "GET", base+"/eureka/apps/JSCLIENT", ""); code != http.StatusNotFound {
		t.Errorf("GET /eureka/apps/JSCLIENT after stop(): %d %s, want 404", code, body)
	}
	if h := ejsStatus(t, base); h.Instances != 1 {
		t.Errorf("status after stop(): %d instances, want 1 (orders-2)", h.Instances)
	}
	if err := n.exit(budget.Of(5 * time.Second)); err != nil {
		t.Errorf("node: %v\nstderr:\n%s", err, n.stderr.String())
	}
	for _, e := range n.history() {
		if e.Step == "log" && (e.Level == "error" || strings.Contains(strings.ToLower(e.Msg), "hashcode")) {
			t.Logf("client log: %s: %s", e.Level, e.Msg)
		}
	}
}

// ejsEvent is one line client.js prints.
type ejsEvent struct {
	Step     string               `json:"step"`
	Status   int                  `json:"status"`
	N        int                  `json:"n"`
	Error    string               `json:"error"`
	Level    string               `json:"level"`
	Msg      string               `json:"msg"`
	Kind     string               `json:"kind"`
	Version  string               `json:"version"`
	Hashcode string               `json:"hashcode"`
	Local    string               `json:"local"`
	Fulls    int                  `json:"fulls"`
	Deltas   int                  `json:"deltas"`
	Apps     map[string][]ejsSeen `json:"apps"`
	raw      string
}

// ejsSeen is an instance as getInstancesByAppId returned it.
type ejsSeen struct {
	ID       string         `json:"id"`
	Host     string         `json:"host"`
	Status   string         `json:"status"`
	Action   string         `json:"action"`
	Metadata map[string]any `json:"metadata"`
}

func ejsFind(apps map[string][]ejsSeen, app, id string) *ejsSeen {
	for i, in := range apps[app] {
		if in.ID == id {
			return &apps[app][i]
		}
	}
	return nil
}

// nodeProc is a script of testdata/eurekajs under node, with the Eureka
// client's modules: each line it prints goes to line, and when its
// stdout ends, to end; it exits when its stdin ends, which the test's
// cleanup does (killing it 3 s later), and its stderr is kept.
type nodeProc struct {
	stdin   io.WriteCloser
	stderr  *ejsBuffer
	exited  chan struct{} // closed when the process has been waited for
	exitErr error
}

// startNode runs node script opts until ctx ends (cancel ends it too).
func startNode(t *testing.T, ctx context.Context, cancel context.CancelFunc, modules, script string, opts any, line func([]byte), end func()) *nodeProc {
	t.Helper()
	arg, err := json.Marshal(opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "node", script, string(arg))
	cmd.Dir = t.TempDir() // no eureka-client.yml for the client to find
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	cmd.WaitDelay = 2 * time.Second
	n := &nodeProc{stderr: &ejsBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = n.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if n.stdin, err = cmd.StdinPipe(); err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start node: %v", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line(sc.Bytes())
		}
		end()
		n.exitErr = cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		n.stdin.Close()
		select {
		case <-n.exited:
		case <-time.After(budget.Of(3 * time.Second)):
			cancel()
			<-n.exited
		}
		cancel()
		if t.Failed() {
			t.Logf("node stderr:\n%s", n.stderr.String())
		}
	})
	return n
}

// ejsNode is client.js running under node.
type ejsNode struct {
	*nodeProc
	events   chan ejsEvent // closed when stdout ends
	deadline time.Time

	mu   sync.Mutex
	seen []ejsEvent
}

func ejsStart(t *testing.T, modules, script string, opts map[string]any) *ejsNode {
	t.Helper()
	// The whole run, not one step: a hung client ends with the test.
	runTimeout := budget.Of(25 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	n := &ejsNode{events: make(chan ejsEvent, 8192), deadline: time.Now().Add(runTimeout)}
	n.nodeProc = startNode(t, ctx, cancel, modules, script, opts, func(b []byte) {
		e := ejsEvent{raw: string(b)}
		if err := json.Unmarshal(b, &e); err != nil {
			e = ejsEvent{Step: "output", Msg: string(b), raw: string(b)}
		}
		n.events <- e
	}, func() { close(n.events) })
	return n
}

// wait returns the first event from now on for which ok holds.
func (n *ejsNode) wait(t *testing.T, what string, ok func(ejsEvent) bool) ejsEvent {
	t.Helper()
	timeout := min(budget.Of(10*time.Second), time.Until(n.deadline))
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case e, open := <-n.events:
			if !open {
				<-n.exited
				t.Fatalf("waiting for %s: node exited (%v)\n%s\nstderr:\n%s", what, n.exitErr, n.tail(), n.stderr.String())
			}
			n.mu.Lock()
			n.seen = append(n.seen, e)
			n.mu.Unlock()
			switch e.Step {
			case "start-failed", "fetch-failed", "timeout":
				t.Errorf("client.js: %s", e.raw)
			}
			if ok(e) {
				return e
			}
		case <-timer.C:
			t.Fatalf("%s: not within %v; the client's last lines:\n%s", what, timeout, n.tail())
		}
	}
}

// waitFetch returns the first fetch of the registry at version since or
// later after which the client's instances satisfy ok; it logs the states
// the client went through on the way.
func (n *ejsNode) waitFetch(t *testing.T, what string, since uint64, ok func(map[string][]ejsSeen) bool) ejsEvent {
	t.Helper()
	var states []string
	ev := n.wait(t, what, func(e ejsEvent) bool {
		if e.Step != "fetched" {
			return false
		}
		if v, err := strconv.ParseUint(e.Version, 10, 64); err != nil || v < since {
			return false
		}
		if ok(e.Apps) {
			return true
		}
		if s := ejsDescribe(e); len(states) == 0 || states[len(states)-1] != s {
			states = append(states, s)
		}
		return false
	})
	if len(states) > 0 {
		t.Logf("%s: the client went through %d other state(s) first:\n  %s", what, len(states), strings.Join(states, "\n  "))
	}
	return ev
}

func ejsDescribe(e ejsEvent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s v%s hash %s local %s:", e.Kind, e.Version, e.Hashcode, e.Local)
	for _, app := range []string{"JSCLIENT", "ORDERS"} {
		fmt.Fprintf(&b, " %s[", app)
		for i, in := range e.Apps[app] {
			if i > 0 {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "%s:%s", in.ID, in.Status)
		}
		b.WriteString("]")
	}
	return b.String()
}

// saw says whether an event already read satisfies ok.
func (n *ejsNode) saw(ok func(ejsEvent) bool) bool {
	for _, e := range n.history() {
		if ok(e) {
			return true
		}
	}
	return false
}

func (n *ejsNode) history() []ejsEvent {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]ejsEvent(nil), n.seen...)
}

func (n *ejsNode) tail() string {
	h := n.history()
	var lines []string
	for _, e := range h[max(0, len(h)-15):] {
		lines = append(lines, "  "+e.raw)
	}
	return strings.Join(lines, "\n")
}

func (n *ejsNode) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(n.stdin, line+"\n"); err != nil {
		t.Fatalf("write %q to node: %v", line, err)
	}
}

// exit waits for node to end by itself and returns how it ended.
func (n *ejsNode) exit(timeout time.Duration) error {
	for {
		select {
		case _, open := <-n.events:
			if !open {
				<-n.exited
				return n.exitErr
			}
		case <-time.After(timeout):
			return errors.New("still running")
		}
	}
}

// ejsBuffer collects node's stderr, written by exec's copier while the
// test reads it.
type ejsBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *ejsBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *ejsBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ejsOrdersBody is a register body for an instance of ORDERS.
func ejsOrdersBody(id string, port int) string {
	return fmt.Sprintf(`{"instance":{"instanceId":%q,"hostName":"%s.local","app":"ORDERS","ipAddr":"10.0.0.7",`+
		`"vipAddress":"orders","secureVipAddress":"orders-secure","status":"UP","port":{"$":%d,"@enabled":"true"},`+
		`"securePort":{"$":443,"@enabled":"false"},"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},`+
		`"leaseInfo":{"renewalIntervalInSecs":30,"durationInSecs":90}}}`, id, id, port)
}

// ejsDo sends one Eureka request as JSON.
func ejsDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	h := http.Header{"Accept": {"application/json"}}
	if body != "" {
		h.Set("Content-Type", "application/json")
	}
	return do(t, method, url, h, body)
}

// ejsWireInstance is an instance as the registry writes it in JSON.
type ejsWireInstance struct {
	InstanceID string `json:"instanceId"`
	App        string `json:"app"`
	HostName   string `json:"hostName"`
	Status     string `json:"status"`
	VIPAddress string `json:"vipAddress"`
	Port       struct {
		Number  int    `json:"$"`
		Enabled string `json:"@enabled"`
	} `json:"port"`
	DataCenterInfo struct {
		Name string `json:"name"`
	} `json:"dataCenterInfo"`
	LeaseInfo struct {
		RenewalIntervalInSecs int   `json:"renewalIntervalInSecs"`
		DurationInSecs        int   `json:"durationInSecs"`
		RegistrationTimestamp int64 `json:"registrationTimestamp"`
		LastRenewalTimestamp  int64 `json:"lastRenewalTimestamp"`
	} `json:"leaseInfo"`
	Metadata map[string]string `json:"metadata"`
}

// ejsInstanceOf reads one instance from GET /eureka/apps/{app}; nil when
// the registry has no such instance.
func ejsInstanceOf(t *testing.T, base, app, id string) *ejsWireInstance {
	t.Helper()
	code, body := ejsDo(t, "GET", base+"/eureka/apps/"+app, "")
	if code == http.StatusNotFound {
		return nil
	}
	if code != http.StatusOK {
		t.Fatalf("GET /eureka/apps/%s: %d %s", app, code, body)
	}
	var doc struct {
		Application struct {
			Name     string            `json:"name"`
			Instance []ejsWireInstance `json:"instance"`
		} `json:"application"`
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("GET /eureka/apps/%s: %v in %s", app, err, body)
	}
	for i, in := range doc.Application.Instance {
		if in.InstanceID == id {
			return &doc.Application.Instance[i]
		}
	}
	return nil
}

// ejsFullHashcode is apps__hashcode of a full fetch.
func ejsFullHashcode(t *testing.T, base string) string {
	t.Helper()
	code, body := ejsDo(t, "GET", base+"/eureka/apps/", "")
	var doc struct {
		Applications struct {
			Hashcode string `json:"apps__hashcode"`
		} `json:"applications"`
	}
	if err := json.Unmarshal([]byte(body), &doc); code != http.StatusOK || err != nil {
		t.Fatalf("GET /eureka/apps/: %d %v %s", code, err, body)
	}
	return doc.Applications.Hashcode
}

// ejsStatus reads GET /shardctl/v1/status.
func ejsStatus(t *testing.T, base string) registryapi.Health {
	t.Helper()
	code, body := ejsDo(t, "GET", base+"/shardctl/v1/status", "")
	var h registryapi.Health
	if err := json.Unmarshal([]byte(body), &h); code != http.StatusOK || err != nil {
		t.Fatalf("GET /shardctl/v1/status: %d %v %s", code, err, body)
	}
	return h
}

// ejsEventually polls cond until it holds, for up to budget.Of 5 s.
func ejsEventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	limit := budget.Of(5 * time.Second)
	deadline := time.Now().Add(limit)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; %s", what, limit.Round(time.Millisecond), state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
