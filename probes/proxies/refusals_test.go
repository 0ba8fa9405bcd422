package proxies

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// fakeProxy serves a proxy's counters of new instances.
type fakeProxy struct {
	mu                     sync.Mutex
	asked, refused         float64
	sentA, refusedA, sentB float64
	activate               float64 // another RPC: not new instances
}

func (f *fakeProxy) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(w, `# TYPE shardctl_proxy_requests_total counter
shardctl_proxy_requests_total{rpc="CreateProcessInstance",code="OK"} %g
shardctl_proxy_requests_total{rpc="CreateProcessInstance",code="ResourceExhausted"} %g
shardctl_proxy_requests_total{rpc="ActivateJobs",code="ResourceExhausted"} %g
# TYPE shardctl_proxy_shard_requests_total counter
shardctl_proxy_shard_requests_total{shard="a",rpc="CreateProcessInstance",code="OK"} %g
shardctl_proxy_shard_requests_total{shard="a",rpc="CreateProcessInstance",code="ResourceExhausted"} %g
shardctl_proxy_shard_requests_total{shard="b",rpc="CreateProcessInstanceWithResult",code="OK"} %g
`, f.asked-f.refused, f.refused, f.activate, f.sentA-f.refusedA, f.refusedA, f.sentB)
}

// The proxies' refusals are rates between two reads: of what clients
// asked, the part refused; of what each shard was sent, the part it
// refused. Other RPCs do not count; a proxy that does not answer is left
// out, not taken for zero.
func TestMeter(t *testing.T) {
	f := &fakeProxy{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	views := []View{{Proxy: "p", Admin: srv.URL}, {Proxy: "gone", Admin: "http://127.0.0.1:1"}}
	m := &Meter{}
	if r := m.Read(context.Background(), views); r != nil {
		t.Fatalf("rates from one read: %+v", r)
	}
	f.mu.Lock()
	f.asked, f.refused, f.sentA, f.refusedA, f.sentB, f.activate = 100, 40, 50, 10, 10, 1000
	f.mu.Unlock()
	r := m.Read(context.Background(), views)
	if r == nil {
		t.Fatal("no rates from two reads")
	}
	if math.Abs(r.Share-0.4) > 1e-9 || r.AskedPerSec <= 0 || math.Abs(r.PerSec/r.AskedPerSec-0.4) > 1e-9 {
		t.Errorf("federation: %+v, want 40%% refused", r)
	}
	if math.Abs(r.Shards["a"]-0.2) > 1e-9 || r.Shards["b"] != 0 || len(r.Shards) != 2 {
		t.Errorf("shards %v, want a 20%% and b 0%%", r.Shards)
	}
}
