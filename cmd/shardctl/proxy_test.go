package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// startProxyServe runs `shardctl proxy serve` and returns its client
// address and its admin address.
func startProxyServe(t *testing.T, args ...string) (*exec.Cmd, string, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)...)
	cmd.Env = baseEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r := bufio.NewReader(stderr)
	lines := make(chan string, 2)
	go func() {
		for range 2 {
			l, _ := r.ReadString('\n')
			lines <- strings.TrimSpace(l)
		}
	}()
	var got []string
	for range 2 {
		select {
		case l := <-lines:
			got = append(got, l)
		case <-time.After(20 * time.Second):
			t.Fatalf("proxy serve printed %q within 20s", got)
		}
	}
	addr, ok := strings.CutPrefix(got[0], "listening on ")
	if !ok {
		t.Fatalf("first stderr line %q", got[0])
	}
	admin := strings.TrimSuffix(strings.TrimPrefix(got[1], "admin on http://"), "/shards")
	return cmd, addr, admin
}

func TestProxyServe(t *testing.T) {
	_, a, _ := startServe(t, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2")
	_, b, _ := startServe(t, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2")
	cmd, addr, admin := startProxyServe(t, "--shard", "blue="+a, "--shard", "green="+b+",slot=5")

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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topo, err := c.NewTopologyCommand().Send(ctx)
	if err != nil || topo.PartitionsCount != 4 {
		t.Fatalf("topology through the proxy: %+v, %v", topo, err)
	}

	stopWithSIGTERM(t, cmd)
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
