package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// startServe runs `shardctl sim serve` and returns it with the address
// from its first stderr line.
func startServe(t *testing.T, args ...string) (*proctest.Process, string) {
	t.Helper()
	p := proctest.Start(t, bin, nil, append([]string{"sim", "serve"}, args...)...)
	return p, p.Addr
}

func TestSimServe(t *testing.T) {
	t.Parallel()
	p, addr := startServe(t, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2")
	metricsURL := p.Line(t, "metrics on ")

	c := simtest.Client(t, addr)
	topo, err := c.NewTopologyCommand().Send(budget.Context(t, 10*time.Second))
	if err != nil || topo.PartitionsCount != 2 {
		t.Fatalf("topology %+v, %v", topo, err)
	}

	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"zeebe_log_appender_last_appended_position", "zeebe_stream_processor_last_processed_position", "zeebe_backpressure_requests_limit"} {
		if !strings.Contains(string(body), name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// The address is taken: a second simulator says so and exits 1.
	again := runBin(t, bin, baseEnv(), "", "sim", "serve", "--listen", addr, "--metrics", "127.0.0.1:0")
	if again.code != 1 || !strings.Contains(again.stderr, "address already in use") {
		t.Errorf("second serve on %s: exit %d, stderr %q", addr, again.code, again.stderr)
	}

	// SIGTERM: a clean stop, exit 0, and the port is free again.
	p.Terminate(t)
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Error("the gateway still accepts connections after stopping")
	}
}

func TestSimServeRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--partitions", "0"},
		{"--partitions", "128"},
		{"--listen", "nocolon"},
		{"--capacity", "-5"},
		{"--backlog-limit", "0"},
	} {
		r := runBin(t, bin, baseEnv(), "", append([]string{"sim", "serve"}, args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("sim serve %v: exit %d, stderr %q; want 2 naming %s", args, r.code, r.stderr, args[0])
		}
	}
}
