package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/logs/logstest"
)

func post(t *testing.T, s *Sim, path string) (int, Faults) {
	t.Helper()
	resp, err := http.Post("http://"+s.MetricsAddr().String()+path, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var f Faults
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, f
}

func get(t *testing.T, s *Sim, path string) int {
	t.Helper()
	resp, err := http.Get("http://" + s.MetricsAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestFaultInjection(t *testing.T) {
	log, lines := logstest.New()
	s := startSim(t, Config{Partitions: 2, Logger: log})
	c := newClient(t, s)
	deploy(t, c, "p.bpmn", linearProcess("p", 3, "a"))
	if get(t, s, "/healthz") != 200 || get(t, s, "/readyz") != 200 {
		t.Fatal("not healthy and ready after start")
	}

	for _, bad := range []string{"/fault/pause", "/fault/pause?duration=-1s", "/fault/pause?duration=soon", "/fault/slow?factor=0.5", "/fault/slow?factor=x"} {
		if code, _ := post(t, s, bad); code != http.StatusBadRequest {
			t.Errorf("POST %s = %d, want 400", bad, code)
		}
	}

	// A stall: commands are accepted and queue up, none is processed.
	code, f := post(t, s, "/fault/pause?duration=1h")
	if code != 200 || f.PausedUntil == nil {
		t.Fatalf("pause: %d %+v", code, f)
	}
	lines.Wait(t, time.Second, "fault injected: processing paused", "fault", "pause", "for", "1h0m0s")
	done := make(chan error, 1)
	go func() {
		_, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(context.Background())
		done <- err
	}()
	budget.Eventually(t, 5*time.Second, "the create to queue", func() bool {
		q := s.QueueLength()
		return q[0]+q[1] == 1
	})
	select {
	case err := <-done:
		t.Fatalf("processed during a pause: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if q := scrape(t, s, "zeebe_log_appender_last_appended_position") - scrape(t, s, "zeebe_stream_processor_last_processed_position"); q < 1 {
		t.Errorf("queue from metrics = %v during the stall", q)
	}
	if code, f = post(t, s, "/fault/resume"); code != 200 || f.PausedUntil != nil {
		t.Fatalf("resume: %d %+v", code, f)
	}
	lines.Wait(t, time.Second, "faults ended", "wasPaused", true, "wasRefusing", false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if code, f = post(t, s, "/fault/slow?factor=5"); code != 200 || f.SlowFactor != 5 {
		t.Errorf("slow: %d %+v", code, f)
	}
	lines.Wait(t, time.Second, "fault injected: records slowed down", "fault", "slow", "factor", 5)
	create(t, c, "p", nil) // slower, still served

	// Refused: the gateway is gone for clients, and not ready.
	if code, f = post(t, s, "/fault/refuse"); code != 200 || !f.Refusing {
		t.Fatalf("refuse: %d %+v", code, f)
	}
	lines.Wait(t, time.Second, "fault injected: the gateway refuses connections", "fault", "refuse", "address", s.Addr().String())
	if get(t, s, "/readyz") != http.StatusServiceUnavailable {
		t.Error("ready while refusing connections")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := c.NewTopologyCommand().Send(ctx)
	cancel()
	if code := grpcCode(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Errorf("topology while refusing: %v, want UNAVAILABLE", err)
	}
	if code, f = post(t, s, "/fault/resume"); code != 200 || f.Refusing || f.SlowFactor != 1 {
		t.Fatalf("resume: %d %+v", code, f)
	}
	lines.Wait(t, time.Second, "faults ended", "wasSlowFactor", 5, "wasRefusing", true)
	budget.Eventually(t, 15*time.Second, "the client to reconnect", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(time.Second))
		defer cancel()
		_, err := c.NewTopologyCommand().Send(ctx)
		return err == nil
	})
	if get(t, s, "/readyz") != 200 {
		t.Error("not ready after resume")
	}
}
