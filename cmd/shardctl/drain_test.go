package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// drainPieces runs a registry and two simulators registered in it as
// blue-1 and blue-2, and returns the environment that points shardctl at
// the registry, and blue-1's gateway.
func drainPieces(t *testing.T) (env []string, blue1 string) {
	t.Helper()
	reg := proctest.Start(t, bin, nil, "registry", "serve", "--listen", "127.0.0.1:0")
	regURL := "http://" + reg.Addr + "/eureka"
	for _, id := range []string{"blue-1", "blue-2"} {
		p := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
			"--partitions", "1", "--timer-interval", "50ms", "--register", regURL, "--shard-id", id, "--pool", "blue")
		p.Line(t, "registered as shard ")
		if id == "blue-1" {
			blue1 = p.Addr
		}
	}
	return append(baseEnv(), "SHARDCTL_REGISTRY="+regURL), blue1
}

func shardState(t *testing.T, env []string, id string) string {
	t.Helper()
	r := runBin(t, bin, env, "", "shards", "get", id, "-o", "json")
	var s struct{ State string }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
		t.Fatalf("shards get %s: exit %d: %s%s", id, r.code, r.stdout, r.stderr)
	}
	return s.State
}

// A shard with an open incident: drain --wait names it as the blocker
// within --stuck-after polls and exits 4 at --timeout, the shard still
// DRAINING; undrain brings it back.
func TestDrainCommandTimesOutOnAnIncident(t *testing.T) {
	t.Parallel()
	env, blue1 := drainPieces(t)
	zc := simtest.Client(t, blue1)
	ctx := budget.Context(t, 30*time.Second)
	if _, err := zc.NewDeployResourceCommand().AddResource(load.Process("order", "pay"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := zc.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx); err != nil {
		t.Fatal(err)
	}
	jobs, err := zc.NewActivateJobsCommand().JobType("pay").MaxJobsToActivate(1).Send(ctx)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("activate: %v, %d jobs", err, len(jobs))
	}
	if _, err := zc.NewFailJobCommand().JobKey(jobs[0].Key).Retries(0).Send(ctx); err != nil {
		t.Fatal(err)
	}

	// A timeout the test waits out: long enough for the 3 polls on a
	// loaded machine, not stretched as far as a limit would be.
	timeout := budget.Capped(2*time.Second, 8*time.Second)
	r := runBin(t, bin, env, "", "drain", "blue-1", "--wait", "--poll", "100ms", "--stuck-after", "3", "--timeout", timeout.String())
	if r.code != 4 {
		t.Fatalf("exit %d, want 4 (timed out)\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"shard blue-1 DRAINING (was UP)", "shard blue-1: 1 instance in flight, 1 incident", "no progress for 3 polls", "1 incident open (keys "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "timed out: blue-1 still DRAINING with 1 instance in flight, 1 incident") || !strings.Contains(r.stderr, "shardctl undrain blue-1") {
		t.Errorf("stderr: %s", r.stderr)
	}
	if st := shardState(t, env, "blue-1"); st != "DRAINING" {
		t.Errorf("blue-1 is %s after the timeout, want DRAINING", st)
	}
	if r := runBin(t, bin, env, "", "undrain", "blue-1"); r.code != 0 || !strings.Contains(r.stdout, "shard blue-1 UP") {
		t.Errorf("undrain: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// An idle shard drains at once: JSON lines, the last one empty, exit 0
// and OUT_OF_SERVICE. Bad input changes nothing.
func TestDrainCommand(t *testing.T) {
	t.Parallel()
	env, _ := drainPieces(t)
	r := runBin(t, bin, env, "", "drain", "blue-2", "--wait", "--poll", "100ms", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var first, last struct {
		Event, Shard, State string
		Backlog             *struct{ InFlight float64 }
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Event != "draining" {
		t.Errorf("first line %q (%v): want the draining event", lines[0], err)
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Event != "empty" || last.State != "OUT_OF_SERVICE" {
		t.Errorf("last line %q (%v): want the empty event, OUT_OF_SERVICE", lines[len(lines)-1], err)
	}
	if st := shardState(t, env, "blue-2"); st != "OUT_OF_SERVICE" {
		t.Errorf("blue-2 is %s, want OUT_OF_SERVICE", st)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"drain", "blue-1", "nope"}, 1, "no shard nope"},
		{[]string{"drain"}, 2, "requires at least 1 arg"},
		{[]string{"drain", "blue-1", "--wait", "--poll", "0s"}, 2, "--poll must be positive"},
		{[]string{"drain", "blue-1", "--wait", "--scrape", "blue-1=nourl"}, 2, "--scrape"},
		{[]string{"drain", "blue-1", "--registry", "http://127.0.0.1:1/eureka"}, 1, "unreachable"},
		{[]string{"undrain", "nope"}, 1, "no shard nope"},
	} {
		r := runBin(t, bin, env, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
			t.Errorf("%v: exit %d, stderr %q; want %d and one line with %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}
	if st := shardState(t, env, "blue-1"); st != "UP" {
		t.Errorf("blue-1 is %s after refused commands, want UP", st)
	}
}
