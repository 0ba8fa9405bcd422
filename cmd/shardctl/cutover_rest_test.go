package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/restgateway/sdktest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A cutover under Camunda's TypeScript SDK, speaking REST to the proxy:
// its steady workload (instances started and their jobs completed by the
// SDK's own workers) runs through `cutover apply` from blue to green
// under gates. No creation fails, every instance completes once, green
// takes the new ones, and blue drains to empty.
func TestCutoverOverREST(t *testing.T) {
	t.Parallel()
	f := newFederation(t)
	f.startSim(t, "blue-1", "blue")
	f.startSim(t, "blue-2", "blue")
	f.startSim(t, "green-1", "green", "--status", "OUT_OF_SERVICE")
	f.startSim(t, "green-2", "green", "--status", "OUT_OF_SERVICE")
	f.startProxy(t, "--rest-listen", "127.0.0.1:0")
	base := strings.TrimSuffix(f.proxy.Line(t, "REST API on "), "/v2")
	green := map[int]bool{}
	for _, s := range f.view(t).Shards {
		if s.Pool == "green" {
			green[s.Slot] = true
		}
	}
	sdk := sdktest.New(t, base)
	sdk.Deploy(t)

	gates := writeGates(t, `gates:
- name: green-not-critical
  signal: level
  failureCondition: result[0] >= 2
  interval: 2s
`)
	// The workload runs before, through and after the cutover: it stops
	// a few seconds after apply returns.
	stop := filepath.Join(t.TempDir(), "stop")
	applied := make(chan result, 1)
	go func() {
		defer func() { _ = os.WriteFile(stop, nil, 0o644) }()
		_ = budget.Wait(budget.Of(time.Minute), func() bool {
			n, _ := simtest.ReadMetric(f.admin+"/metrics", "shardctl_proxy_requests_total", `rpc="CreateProcessInstance"`, `code="OK"`)
			return n >= 30
		})
		r := runBinFor(t, budget.Of(3*time.Minute), bin, f.env, "", "cutover", "apply", "--from", "blue", "--to", "green", "--steps", "50,100",
			"--step-pause", "5s", "--gate-window", "20s", "--gates", gates, "--poll", "500ms", "--yes", "-o", "json")
		time.Sleep(3 * time.Second)
		applied <- r
	}()
	const rate = 10
	s := sdk.Steady(t, rate, 4*time.Minute, stop)
	r := <-applied
	if r.code != 0 {
		t.Fatalf("cutover apply: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	var timeline []string
	for _, e := range cutoverEvents(t, r.stdout) {
		timeline = append(timeline, e.At.Format("15:04:05.0")+" "+e.Event)
	}
	t.Logf("apply: %s", strings.Join(timeline, ", "))
	if s.Failed > 0 || s.Twice > 0 {
		t.Errorf("%d creations failed (%v), %d jobs came twice", s.Failed, s.Errors, s.Twice)
	}
	if s.Completed != len(s.Created) || len(s.Created) < 30 {
		t.Errorf("%d of %d instances completed, want all of at least 30", s.Completed, len(s.Created))
	}
	onGreen := 0
	for _, k := range s.Created {
		key, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		if green[slotOf(key)] {
			onGreen++
		}
	}
	// Started before, during and after the cutover: both pools took some,
	// green the more (it has all of them from the end of the cutover).
	if onGreen == 0 || onGreen == len(s.Created) {
		t.Errorf("green took %d of %d instances, want a part", onGreen, len(s.Created))
	}
	for _, id := range []string{"blue-1", "blue-2"} {
		if st := shardState(t, f.env, id); st != "OUT_OF_SERVICE" {
			t.Errorf("%s is %s after the cutover, want OUT_OF_SERVICE", id, st)
		}
	}
	if !strings.Contains(r.stdout, `"event":"done"`) {
		t.Errorf("apply did not end with done (blue drained): %s", r.stdout)
	}
	t.Logf("%d instances over REST, %d on green, all completed", len(s.Created), onGreen)
}
