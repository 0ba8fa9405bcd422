// Package simtest starts shard simulators for other packages' tests and
// reads what they report, so each package does not write its own.
// Tests only: no runtime or tool imports it outside its tests.
package simtest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim"
)

// Start runs a simulator until the test ends, on free loopback ports
// unless cfg names its addresses (a restart on the same address).
func Start(t testing.TB, cfg sim.Config) *sim.Sim {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.MetricsListen == "" {
		cfg.MetricsListen = "127.0.0.1:0"
	}
	if cfg.TimerInterval == 0 {
		cfg.TimerInterval = 100 * time.Millisecond
	}
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// Metric sums the series of one metric at a /metrics URL whose labels
// contain every given label pair (e.g. `action="completed"`).
func Metric(t testing.TB, url, name string, labels ...string) float64 {
	t.Helper()
	v, err := ReadMetric(url, name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ReadMetric is Metric for a goroutine of a test's own, where a failure
// cannot end the test: it returns the error.
func ReadMetric(url, name string, labels ...string) (float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		var v float64
		f := strings.Fields(line)
		if _, err := fmt.Sscan(f[len(f)-1], &v); err == nil {
			sum += v
		}
	}
	return sum, nil
}

// SimMetric is Metric on a simulator's /metrics.
func SimMetric(t testing.TB, s *sim.Sim, name string, labels ...string) float64 {
	t.Helper()
	return Metric(t, "http://"+s.MetricsAddr().String()+"/metrics", name, labels...)
}

// Zbctl is the path of zbctl v8.5.20: $ZBCTL, else the copy that
// scripts/tools.sh builds once per machine from the Go module proxy.
func Zbctl(t testing.TB) string { return proctest.Tool(t, "zbctl", "ZBCTL") }

// Client is the real Zeebe Go client on a plaintext connection, closed when
// the test ends; OAuth settings from the environment are ignored.
func Client(t testing.TB, addr string) zbc.Client {
	t.Helper()
	if os.Getenv("ZEEBE_CLIENT_ID") != "" {
		t.Setenv("ZEEBE_CLIENT_ID", "") // not in a parallel test: only when set
	}
	c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: addr, UsePlaintextConnection: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Worker opens the job worker b builds on client c and closes both when
// the test ends, the client first: a worker's Close waits for its poll in
// flight, and a long poll would otherwise hold the test for its whole
// request timeout.
func Worker(t testing.TB, c zbc.Client, b worker.JobWorkerBuilderStep3) worker.JobWorker {
	t.Helper()
	w := b.Open()
	t.Cleanup(func() {
		_ = c.Close()
		w.Close()
	})
	return w
}
