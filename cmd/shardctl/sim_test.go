package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// startServe runs `shardctl sim serve` and returns the address from its
// first stderr line, with the rest of stderr still readable.
func startServe(t *testing.T, args ...string) (*exec.Cmd, string, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"sim", "serve"}, args...)...)
	cmd.Env = baseEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	r := bufio.NewReader(stderr)
	line := make(chan string, 1)
	go func() {
		l, _ := r.ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(strings.TrimSpace(l), "listening on ")
		if !ok {
			t.Fatalf("first stderr line %q, want \"listening on HOST:PORT\"", l)
		}
		return cmd, addr, r
	case <-time.After(20 * time.Second):
		t.Fatal("no \"listening on\" line within 20s")
	}
	return nil, "", nil
}

func TestSimServe(t *testing.T) {
	cmd, addr, stderr := startServe(t, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2")
	metricsLine, _ := stderr.ReadString('\n')
	metricsURL := strings.TrimSpace(strings.TrimPrefix(metricsLine, "metrics on "))

	c := simtest.Client(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topo, err := c.NewTopologyCommand().Send(ctx)
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
	stopWithSIGTERM(t, cmd)
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Error("the gateway still accepts connections after stopping")
	}
}

func TestSimServeRejectsBadFlags(t *testing.T) {
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
