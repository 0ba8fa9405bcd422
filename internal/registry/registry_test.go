package registry

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/ledger"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// clock is a test's time, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestRegistry(t testing.TB, opts Options) (*Registry, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	opts.Now = c.Now
	r, err := NewRegistry(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, c
}

func testInstance(app, id string, renewal, duration int) *registryapi.Instance {
	return &registryapi.Instance{
		InstanceID: id, App: app, HostName: id + ".local", IPAddr: "10.0.0.1", Port: 8080, PortEnabled: true,
		Status: registryapi.StatusUp, DataCenterInfo: registryapi.DataCenterInfo{Name: "MyOwn"},
		LeaseInfo: registryapi.LeaseInfo{RenewalIntervalInSecs: renewal, DurationInSecs: duration},
	}
}

// A lease ends at the last renewal plus its duration: not twice the
// duration, as Eureka's does.
func TestLeaseEndsAtRenewalPlusDuration(t *testing.T) {
	r, c := newTestRegistry(t, Options{})
	if err := r.Register("ORDERS", testInstance("ORDERS", "a", 5, 10)); err != nil {
		t.Fatal(err)
	}
	c.advance(5 * time.Second)
	if err := r.Renew("ORDERS", "a", 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after   time.Duration // since the renewal
		evicted int
	}{
		{9900 * time.Millisecond, 0},
		{10100 * time.Millisecond, 1},
	} {
		c.mu.Lock()
		c.now = time.Date(2026, 11, 30, 12, 0, 5, 0, time.UTC).Add(tc.after)
		c.mu.Unlock()
		if n := r.Evict(); n != tc.evicted {
			t.Errorf("%v after the renewal: evicted %d, want %d", tc.after, n, tc.evicted)
		}
	}
	if err := r.Renew("ORDERS", "a", 0); err != registryapi.ErrNotFound {
		t.Errorf("renew after eviction: %v, want not found (so the client registers again)", err)
	}
}

func TestSelfPreservation(t *testing.T) {
	r, c := newTestRegistry(t, Options{SelfPreservation: true, RenewalThreshold: 0.85})
	for i := range 10 {
		if err := r.Register("ORDERS", testInstance("ORDERS", fmt.Sprint("i", i), 30, 90)); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.ExpectedRenewalsPerMinute(); got != 20 {
		t.Fatalf("expected renewals %v, want 20 (10 instances renewing every 30 s)", got)
	}
	// A partition: nothing renews for two minutes.
	c.advance(2 * time.Minute)
	if !r.SelfPreserving() {
		t.Fatalf("no renewals for 2 minutes, and self-preservation is off")
	}
	if n := r.Evict(); n != 0 {
		t.Fatalf("self-preservation evicted %d", n)
	}
	// The expected count follows cancellations at once.
	for i := range 5 {
		if err := r.Cancel("ORDERS", fmt.Sprint("i", i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.ExpectedRenewalsPerMinute(); got != 10 {
		t.Fatalf("after 5 cancellations expected renewals %v, want 10", got)
	}
	// Renewals come back (every instance renews twice in a minute) and
	// eviction resumes.
	for range 2 {
		for i := 5; i < 10; i++ {
			if err := r.Renew("ORDERS", fmt.Sprint("i", i), 0); err != nil {
				t.Fatal(err)
			}
		}
		c.advance(20 * time.Second)
	}
	if r.SelfPreserving() {
		t.Fatalf("10 renewals in the last minute against a threshold of 8.5, and still self-preserving: %+v", r.Status())
	}
	// Two instances stop renewing while three keep at it (every 20 s).
	// Nine renewals a minute stay above the threshold, so the two leases
	// expire and are evicted, at most 15% of the registry per run, as in
	// Eureka; the expected count falls with every eviction (Eureka's does
	// not, and then holds self-preservation on for good).
	for step := range 7 {
		if step > 0 {
			c.advance(20 * time.Second)
		}
		for i := 5; i < 8; i++ {
			if err := r.Renew("ORDERS", fmt.Sprint("i", i), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, want := range []float64{8, 6} {
		if n := r.Evict(); n != 1 {
			t.Fatalf("evicted %d, want 1 (5 instances, 15%% per run)", n)
		}
		if got := r.ExpectedRenewalsPerMinute(); got != want {
			t.Errorf("after an eviction expected renewals %v, want %v", got, want)
		}
	}
	if n := r.Evict(); n != 0 {
		t.Errorf("evicted %d instances that renew", n)
	}
}

func TestSlots(t *testing.T) {
	r, _ := newTestRegistry(t, Options{ShardsApp: "ZEEBE-SHARDS"})
	reg := func(id, slot string) error {
		in := testInstance("ZEEBE-SHARDS", id, 30, 90)
		if slot != "" {
			in.Metadata = map[string]string{registryapi.MetaSlot: slot}
		}
		return r.Register("zeebe-shards", in)
	}
	slotOf := func(id string) string {
		in, err := r.Instance("ZEEBE-SHARDS", id)
		if err != nil {
			t.Fatal(err)
		}
		return in.Metadata[registryapi.MetaSlot]
	}
	for _, tc := range []struct {
		id, ask, want string
		err           bool
	}{
		{"a", "", "1", false},
		{"b", "", "2", false},
		{"c", "5", "5", false},
		{"d", "5", "", true},  // taken by c
		{"d", "32", "", true}, // out of range
		{"d", "x", "", true},
		{"d", "", "3", false},
		{"a", "", "1", false}, // registering again keeps the slot
	} {
		err := reg(tc.id, tc.ask)
		if (err != nil) != tc.err {
			t.Fatalf("register %s asking slot %q: err %v, want error %v", tc.id, tc.ask, err, tc.err)
		}
		if err == nil && slotOf(tc.id) != tc.want {
			t.Errorf("%s got slot %s, want %s", tc.id, slotOf(tc.id), tc.want)
		}
	}
	// A shard that leaves keeps its slot until it is released.
	if err := r.Cancel("ZEEBE-SHARDS", "a"); err != nil {
		t.Fatal(err)
	}
	if err := reg("e", "1"); err == nil {
		t.Errorf("slot 1 was given away while shard a still holds it")
	}
	if err := r.ReleaseSlot("ZEEBE-SHARDS", "a"); err != nil {
		t.Fatal(err)
	}
	if err := reg("e", "1"); err != nil {
		t.Errorf("slot 1 after release: %v", err)
	}
	// Other apps get no slots.
	if err := r.Register("ORDERS", testInstance("ORDERS", "o", 30, 90)); err != nil {
		t.Fatal(err)
	}
	if in, _ := r.Instance("ORDERS", "o"); in.Metadata[registryapi.MetaSlot] != "" {
		t.Errorf("an instance of another app got a slot")
	}
}

const registerJSON = `{"instance":{"instanceId":"%s","hostName":"h","app":"%s","ipAddr":"10.0.0.2","status":"%s",
"port":{"$":8080,"@enabled":"true"},"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"}}}`

var jsonHeader = http.Header{"Accept": {"application/json"}, "Content-Type": {"application/json"}}

func register(t *testing.T, base, app, id, status string) {
	t.Helper()
	if code, body := do(t, "POST", base+"/eureka/apps/"+app, jsonHeader, fmt.Sprintf(registerJSON, id, app, status)); code != http.StatusNoContent {
		t.Fatalf("register %s/%s: %d %s", app, id, code, body)
	}
}

// Reads see a change at once (with ReadStaleness -1), and a delta carries the whole registry's
// hashcode so that a client can check its copy.
func TestReadsSeeChangesAtOnceAndDeltas(t *testing.T) {
	_, base := startServer(t, Config{Options: Options{ReadStaleness: -1}})
	register(t, base, "ORDERS", "a", "UP")
	register(t, base, "ORDERS", "b", "UP")
	register(t, base, "BILLING", "c", "STARTING")
	type apps struct {
		Applications struct {
			Hash string `json:"apps__hashcode"`
			App  []struct {
				Name     string
				Instance []struct {
					InstanceID string `json:"instanceId"`
					Status     string
					ActionType string
				}
			} `json:"application"`
		}
	}
	read := func(path string, gz bool) apps {
		t.Helper()
		h := http.Header{"Accept": {"application/json"}}
		if gz {
			h.Set("Accept-Encoding", "gzip")
		}
		code, body := do(t, "GET", base+path, h, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		if gz {
			zr, err := gzip.NewReader(strings.NewReader(body))
			if err != nil {
				t.Fatalf("GET %s with gzip: %v", path, err)
			}
			b, err := io.ReadAll(zr)
			if err != nil {
				t.Fatalf("GET %s with gzip: %v", path, err)
			}
			body = string(b)
		}
		var a apps
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return a
	}
	if got := read("/eureka/apps", false).Applications.Hash; got != "STARTING_1_UP_2_" {
		t.Errorf("hashcode %q, want STARTING_1_UP_2_", got)
	}
	if code, _ := do(t, "PUT", base+"/eureka/v2/apps/ORDERS/b/status?value=OUT_OF_SERVICE", nil, ""); code != http.StatusOK {
		t.Fatalf("status override: %d", code)
	}
	full := read("/eureka/v2/apps/", true)
	if full.Applications.Hash != "OUT_OF_SERVICE_1_STARTING_1_UP_1_" {
		t.Errorf("right after an override the full fetch says %q", full.Applications.Hash)
	}
	delta := read("/eureka/apps/delta", true)
	if delta.Applications.Hash != full.Applications.Hash {
		t.Errorf("delta hashcode %q, full %q: a client would refetch everything", delta.Applications.Hash, full.Applications.Hash)
	}
	found := false
	for _, a := range delta.Applications.App {
		for _, in := range a.Instance {
			if in.InstanceID == "b" {
				found = in.Status == "OUT_OF_SERVICE" && in.ActionType == registryapi.ActionModified
			}
		}
	}
	if !found {
		t.Errorf("the delta does not carry b as MODIFIED and OUT_OF_SERVICE: %+v", delta)
	}
	if code, _ := do(t, "DELETE", base+"/eureka/apps/ORDERS/a", nil, ""); code != http.StatusOK {
		t.Fatalf("cancel: %d", code)
	}
	if code, _ := do(t, "GET", base+"/eureka/apps/ORDERS/a", nil, ""); code != http.StatusNotFound {
		t.Errorf("a cancelled instance is still served")
	}
	if code, _ := do(t, "DELETE", base+"/eureka/apps/ORDERS/a", nil, ""); code != http.StatusNotFound {
		t.Errorf("cancelling twice: %d, want 404", code)
	}
}

func TestBadRequests(t *testing.T) {
	_, base := startServer(t, Config{})
	register(t, base, "ORDERS", "a", "UP")
	register(t, base, registryapi.DefaultShardsApp, "s", "UP")
	shards := "/eureka/apps/" + registryapi.DefaultShardsApp
	big := `{"instance":{"instanceId":"x","metadata":{"k":"` + strings.Repeat("x", 2<<20) + `"}}}`
	for _, tc := range []struct {
		name, method, path, ctype, body string
		code                            int
		says                            string
	}{
		{"no id", "POST", "/eureka/apps/ORDERS", "application/json", `{"instance":{"app":"ORDERS","ipAddr":"1.2.3.4","dataCenterInfo":{"name":"MyOwn"}}}`, 400, "instanceId"},
		{"no ip", "POST", "/eureka/apps/ORDERS", "application/json", `{"instance":{"instanceId":"x","app":"ORDERS","dataCenterInfo":{"name":"MyOwn"}}}`, 400, "ipAddr"},
		{"app mismatch", "POST", "/eureka/apps/ORDERS", "application/json", `{"instance":{"instanceId":"x","app":"BILLING","ipAddr":"1.2.3.4","dataCenterInfo":{"name":"MyOwn"}}}`, 400, "mismatched app"},
		{"no data center", "POST", "/eureka/apps/ORDERS", "application/json", `{"instance":{"instanceId":"x","app":"ORDERS","ipAddr":"1.2.3.4"}}`, 400, "dataCenterInfo"},
		{"data center without name", "POST", "/eureka/apps/ORDERS", "application/json", `{"instance":{"instanceId":"x","app":"ORDERS","ipAddr":"1.2.3.4","dataCenterInfo":{"@class":"c"}}}`, 400, "dataCenterInfo name"},
		{"malformed JSON", "POST", "/eureka/apps/ORDERS", "application/json", `{"instance":`, 400, "malformed JSON"},
		{"malformed XML", "POST", "/eureka/apps/ORDERS", "application/xml", `<instance><app>`, 400, "malformed XML"},
		{"bad port", "POST", "/eureka/apps/ORDERS", "application/json", `{"instance":{"instanceId":"x","app":"ORDERS","ipAddr":"1","port":{"$":"eighty"},"dataCenterInfo":{"name":"MyOwn"}}}`, 400, "number"},
		{"too big", "POST", "/eureka/apps/ORDERS", "application/json", big, 400, "larger than"},
		{"bad gzip", "POST", "/eureka/apps/ORDERS", "application/json", "not gzip", 400, "gzip"},
		{"unknown renew", "PUT", "/eureka/apps/ORDERS/nobody", "", "", 404, ""},
		{"newer client copy", "PUT", "/eureka/apps/ORDERS/a?lastDirtyTimestamp=99999999999999", "", "", 404, ""},
		{"bad dirty timestamp", "PUT", "/eureka/apps/ORDERS/a?lastDirtyTimestamp=soon", "", "", 400, "lastDirtyTimestamp"},
		{"status without value", "PUT", "/eureka/apps/ORDERS/a/status", "", "", 400, "value"},
		{"unknown status", "PUT", "/eureka/apps/ORDERS/a/status?value=SLEEPY", "", "", 400, "SLEEPY"},
		{"metadata without entries", "PUT", "/eureka/apps/ORDERS/a/metadata", "", "", 400, "metadata"},
		{"bad physical tenants", "POST", shards, "application/json", `{"instance":{"instanceId":"x","app":"` + registryapi.DefaultShardsApp + `","ipAddr":"1.2.3.4","dataCenterInfo":{"name":"MyOwn"},"metadata":{"physicalTenants":"acme,a b"}}}`, 400, "physical tenant \"a b\""},
		{"bad physical tenants later", "PUT", shards + "/s/metadata?physicalTenants=acme,", "", "", 400, "physicalTenants"},
		{"unknown shard state", "PUT", "/shardctl/v1/shards/a/state?app=ORDERS&value=ASLEEP", "", "", 400, "ASLEEP"},
		{"ledger without resources", "POST", "/shardctl/v1/ledger", "application/json", `{"processes":[]}`, 400, "resources"},
		{"unknown ledger entry", "PUT", "/shardctl/v1/ledger/7/keys/s1", "application/json", `{"p@1":5}`, 404, "no deployment 7"},
		{"bad watch version", "GET", "/shardctl/v1/watch?since=yesterday&poll=1", "", "", 400, "since"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.ctype != "" {
				h.Set("Content-Type", tc.ctype)
			}
			if tc.name == "bad gzip" {
				h.Set("Content-Encoding", "gzip")
			}
			code, body := do(t, tc.method, base+tc.path, h, tc.body)
			if code != tc.code || !strings.Contains(body, tc.says) {
				t.Errorf("%s %s: %d %q, want %d saying %q", tc.method, tc.path, code, body, tc.code, tc.says)
			}
		})
	}
	// Nothing of that changed the registry.
	var st registryapi.Health
	_, body := do(t, "GET", base+"/shardctl/v1/status", nil, "")
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Instances != 2 || st.Deployments != 0 {
		t.Errorf("after bad requests the registry holds %+v (%v)", st, err)
	}
}

func TestTokens(t *testing.T) {
	dir := t.TempDir()
	write, read := filepath.Join(dir, "w"), filepath.Join(dir, "r")
	if err := os.WriteFile(write, []byte("w-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(read, []byte("r-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name              string
		cfg               Config
		method, path, tok string
		code              int
	}{
		{"write without token", Config{TokenFile: write}, "DELETE", "/eureka/apps/A/x", "", 401},
		{"write with wrong token", Config{TokenFile: write}, "DELETE", "/eureka/apps/A/x", "nope", 401},
		{"write with token", Config{TokenFile: write}, "DELETE", "/eureka/apps/A/x", "w-secret", 404},
		{"read stays open", Config{TokenFile: write}, "GET", "/eureka/apps", "", 200},
		{"read needs its token", Config{TokenFile: write, ReadTokenFile: read}, "GET", "/eureka/apps", "", 401},
		{"read with its token", Config{TokenFile: write, ReadTokenFile: read}, "GET", "/eureka/apps", "r-secret", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, base := startServer(t, tc.cfg)
			h := http.Header{}
			if tc.tok != "" {
				h.Set("Authorization", "Bearer "+tc.tok)
			}
			if code, body := do(t, tc.method, base+tc.path, h, ""); code != tc.code {
				t.Errorf("%d %s, want %d", code, body, tc.code)
			}
		})
	}
	if _, err := New(Config{TokenFile: filepath.Join(dir, "missing")}); err == nil {
		t.Errorf("a missing token file was accepted")
	}
}

// A watcher sees a change well within a second, as a stream or a poll.
func TestWatch(t *testing.T) {
	s, base := startServer(t, Config{})
	register(t, base, "ZEEBE-SHARDS", "s1", "UP")

	// Long poll: an old version gets what happened since at once; the
	// current one waits for the next change.
	var first registryapi.PollAnswer
	_, body := do(t, "GET", base+"/shardctl/v1/watch?poll=1&since=0", nil, "")
	if err := json.Unmarshal([]byte(body), &first); err != nil || len(first.Events) != 1 || !first.Events[0].Reset || len(first.Events[0].Shards) != 1 {
		t.Fatalf("first poll: %s (%v)", body, err)
	}
	got := make(chan registryapi.PollAnswer, 1)
	go func() {
		_, body := do(t, "GET", fmt.Sprintf("%s/shardctl/v1/watch?poll=1&since=%d", base, first.Version), nil, "")
		var a registryapi.PollAnswer
		_ = json.Unmarshal([]byte(body), &a)
		got <- a
	}()
	// Whether the poll has parked yet or not, it must carry the change: a
	// poll that arrives after it answers at once with what it missed.
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	if err := s.Registry().SetState("ZEEBE-SHARDS", "s1", registryapi.StateDraining); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		if len(a.Events) != 1 || a.Events[0].Shard == nil || a.Events[0].Shard.State != registryapi.StateDraining {
			t.Errorf("poll answer %+v, want s1 DRAINING", a)
		}
		t.Logf("long poll answered %v after the change", time.Since(start))
	case <-time.After(budget.Of(time.Second)):
		t.Fatalf("the long poll did not answer within %v of a change", budget.Of(time.Second))
	}
	if code, body := do(t, "GET", fmt.Sprintf("%s/shardctl/v1/watch?poll=1&since=%d&timeout=100ms", base, s.Registry().Version()), nil, ""); code != 200 || !strings.Contains(body, `"events":[]`) {
		t.Errorf("an idle poll: %d %s", code, body)
	}
	// A version this registry never reached is a watcher of its run
	// before a restart: it starts over, whatever changed since.
	var restarted registryapi.PollAnswer
	_, body = do(t, "GET", fmt.Sprintf("%s/shardctl/v1/watch?poll=1&since=%d&timeout=100ms", base, s.Registry().Version()+1000), nil, "")
	if err := json.Unmarshal([]byte(body), &restarted); err != nil || len(restarted.Events) != 1 || !restarted.Events[0].Reset || len(restarted.Events[0].Shards) != 1 {
		t.Errorf("a poll from before a restart: %s (%v), want a reset with s1", body, err)
	}

	// Server-sent events.
	req, _ := http.NewRequestWithContext(budget.Context(t, 5*time.Second), "GET", base+"/shardctl/v1/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				events <- ev
			}
		}
	}()
	if ev := <-events; ev != "reset" {
		t.Fatalf("first event %q, want reset", ev)
	}
	start = time.Now()
	register(t, base, "ZEEBE-SHARDS", "s2", "UP")
	select {
	case ev := <-events:
		if ev != "added" {
			t.Errorf("event %q, want added", ev)
		}
		t.Logf("the stream carried the change %v after it", time.Since(start))
	case <-time.After(budget.Of(time.Second)):
		t.Fatalf("no event within %v of a registration", budget.Of(time.Second))
	}
	register(t, base, "OTHER", "x", "UP") // another app: nothing for this watcher
	if _, err := s.Registry().AppendDeployment(testDeployment()); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev != "ledger" {
			t.Errorf("event %q, want ledger (another app's change leaked?)", ev)
		}
	case <-time.After(budget.Of(time.Second)):
		t.Fatalf("no ledger event within %v", budget.Of(time.Second))
	}
}

func testDeployment() ledger.Deployment {
	return ledger.Deployment{
		Resources: []ledger.Resource{{Name: "order.bpmn", Content: []byte("<definitions/>")}},
		Processes: []ledger.ProcessID{{BpmnProcessID: "order", Version: 1, Keys: map[string]int64{"s1": 2251799813685249}}},
	}
}

// Renewals read the instance while operators replace it.
func TestRenewWhileChanging(t *testing.T) {
	r, _ := newTestRegistry(t, Options{})
	if err := r.Register("X", testInstance("X", "x", 30, 90)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range 200 {
			_ = r.Renew("X", "x", 1)
		}
	}()
	go func() {
		defer wg.Done()
		for i := range 200 {
			_ = r.SetMetadata("X", "x", map[string]string{"k": fmt.Sprint(i)})
		}
	}()
	wg.Wait()
}
