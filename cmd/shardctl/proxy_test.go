package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
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
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "no shards"},
		{[]string{"--shard", "nope"}, 2, "ID=HOST:PORT"},
		{[]string{"--shard", "a=127.0.0.1:1,slot=40"}, 2, "slot 40"},
		{[]string{"--config", "/nonexistent/proxy.yaml"}, 1, "read proxy config"},
		// Nothing listens there: the proxy cannot read the shard's topology.
		{[]string{"--shard", "a=127.0.0.1:1"}, 1, "read its topology"},
	} {
		r := runBin(t, bin, baseEnv(), "", append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, tt.args...)...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("proxy serve %v: exit %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, tt.code, tt.want)
		}
	}
}
