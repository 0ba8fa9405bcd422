package main

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/internal/source"
)

// startProxyServe runs `shardctl proxy serve` and returns it with its
// client address and its admin address.
func startProxyServe(t *testing.T, args ...string) (*proctest.Process, string, string) {
	t.Helper()
	p := proctest.Start(t, bin, nil, append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)...)
	admin := strings.TrimSuffix(p.Line(t, "admin on http://"), "/shards")
	return p, p.Addr, admin
}

func TestProxyServe(t *testing.T) {
	t.Parallel()
	_, a := startServe(t, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2")
	_, b := startServe(t, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2")
	p, addr, admin := startProxyServe(t, "--shard", "blue="+a, "--shard", "green="+b+",slot=5")

	resp, err := http.Get("http://" + admin + "/shards")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Shards []struct {
			ID         string `json:"id"`
			Slot       int    `json:"slot"`
			State      string `json:"state"`
			Partitions int    `json:"partitions"`
		} `json:"shards"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if err != nil || len(doc.Shards) != 2 || doc.Shards[1].ID != "green" || doc.Shards[1].Slot != 5 || doc.Shards[0].State != "UP" || doc.Shards[0].Partitions != 2 {
		t.Fatalf("/shards: %+v, %v", doc, err)
	}

	c := simtest.Client(t, addr)
	topo, err := c.NewTopologyCommand().Send(budget.Context(t, 20*time.Second))
	if err != nil || topo.PartitionsCount != 4 {
		t.Fatalf("topology through the proxy: %+v, %v", topo, err)
	}

	p.Terminate(t)
}

func TestProxyServeErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no shards"},
		{[]string{"--shard", "nope"}, 2, "ID=HOST:PORT"},
		{[]string{"--shard", "a=127.0.0.1:1,slot=40"}, 2, "slot 40"},
		{[]string{"--config", "/nonexistent/proxy.yaml"}, 1, "proxy config: open /nonexistent/proxy.yaml"},
		// Nothing listens there: the proxy cannot read the shard's topology.
		{[]string{"--shard", "a=127.0.0.1:1"}, 1, "read its topology"},
	} {
		r := runBin(t, bin, baseEnv(), "", append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, tt.args...)...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("proxy serve %v: exit %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, tt.code, tt.want)
		}
	}
}

// The proxy runs one P while it is idle (once its start, which may be
// busy, is 2 s behind it), and every P with --size-procs=false, as
// go_sched_gomaxprocs_threads on /metrics says.
func TestProxyServeSizesProcs(t *testing.T) {
	t.Parallel()
	_, shard := startServe(t, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0")
	for _, tt := range []struct {
		args []string
		want float64
	}{
		{nil, 1},
		{[]string{"--size-procs=false"}, 2},
	} {
		args := append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--shard", "a=" + shard}, tt.args...)
		p := proctest.Start(t, bin, []string{"GOMAXPROCS=2"}, args...)
		admin := strings.TrimSuffix(p.Line(t, "admin on http://"), "/shards")
		ctx := budget.Context(t, 20*time.Second)
		got := -1.0
		for ctx.Err() == nil {
			families, err := source.ReadMetrics(ctx, http.DefaultClient, "http://"+admin+"/metrics")
			if ctx.Err() != nil {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			f := families["go_sched_gomaxprocs_threads"]
			if f == nil || len(f.GetMetric()) != 1 {
				t.Fatalf("%v: no go_sched_gomaxprocs_threads on /metrics", tt.args)
			}
			if got = f.GetMetric()[0].GetGauge().GetValue(); got == tt.want {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got != tt.want {
			t.Errorf("%v with GOMAXPROCS=2: %v Ps, want %v", tt.args, got, tt.want)
		}
		p.Terminate(t)
	}
}

// A proxy out of file descriptors (ulimit -n 40) stops taking new
// connections without stopping: those it serves go on, the rest wait in
// the listen backlog, and once descriptors free up it takes them and
// serves again. Each state change is one log line.
func TestProxyOutOfDescriptors(t *testing.T) {
	t.Parallel()
	_, sim := startServe(t, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "1")
	// Go raises its soft limit to the hard one at start: both are set.
	px := proctest.Start(t, "/bin/sh", nil, "-c", `ulimit -n 40 && exec "$0" "$@"`, bin, "proxy", "serve", "--listen", "127.0.0.1:0",
		"--admin", "127.0.0.1:0", "--conns-per-shard", "1", "--shard", "shard-1="+sim)
	served := simtest.Client(t, px.Addr)
	ctx := budget.Context(t, time.Minute)
	if _, err := served.NewTopologyCommand().Send(ctx); err != nil {
		t.Fatal(err)
	}
	// Connections until the proxy has no descriptor left to accept one.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 60 {
		c, err := net.Dial("tcp", px.Addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	budget.Eventually(t, 10*time.Second, "the proxy to log that accepting failed", func() bool {
		return strings.Contains(px.Stderr(), "accepting client connections failed")
	})
	if _, err := served.NewTopologyCommand().Send(ctx); err != nil {
		t.Errorf("a client served before the descriptors ran out: %v", err)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	budget.Eventually(t, 10*time.Second, "the proxy to log that it accepts again", func() bool {
		return strings.Contains(px.Stderr(), "accepting client connections again")
	})
	late := simtest.Client(t, px.Addr)
	if _, err := late.NewTopologyCommand().Send(ctx); err != nil {
		t.Errorf("a client that connected once descriptors freed up: %v", err)
	}
	select {
	case <-px.Done():
		t.Fatalf("the proxy ended: %v", px.Err())
	default:
	}
}
