package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/probes/capacity"
	"github.com/shardctl/shardctl/probes/health"
)

// probe health with a healthy and a stopped simulator, the registry and
// the proxy: exit 3 naming the stopped one, from the registry's list and
// from arguments alike; the rest reported healthy.
func TestProbeHealth(t *testing.T) {
	t.Parallel()
	f := newFederation(t)
	f.startSim(t, "blue-1", "blue")
	f.startSim(t, "blue-2", "blue")
	f.startProxy(t)
	f.sims["blue-2"].Kill()

	check := func(t *testing.T, args ...string) {
		t.Helper()
		r := runBin(t, bin, f.env, "", append([]string{"probe", "health", "-o", "json"}, args...)...)
		if r.code != 3 {
			t.Fatalf("exit %d, want 3: %s\n%s", r.code, r.stderr, r.stdout)
		}
		var rep health.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v\n%s", err, r.stdout)
		}
		healthy := map[string]bool{}
		defer func() {
			if len(healthy) != 5 {
				t.Errorf("checked %v, want the two shards, the registry, the proxy's gateway and admin", healthy)
			}
		}()
		for _, res := range rep.Results {
			healthy[res.Kind+" "+res.Address] = res.Healthy
			if !res.Healthy && !strings.Contains(r.stderr, res.Name+": ") {
				t.Errorf("stderr does not name %s: %s", res.Name, r.stderr)
			}
		}
		want := map[string]bool{
			"zeebe " + f.sims["blue-1"].Addr: true,
			"zeebe " + f.sims["blue-2"].Addr: false,
			"registry " + f.regURL:           true,
			"proxy " + f.admin:               true,
			"zeebe " + f.proxy.Addr:          true,
		}
		for k, v := range healthy {
			if w, ok := want[k]; !ok || w != v {
				t.Errorf("%s healthy=%v, want %v (known: %v)", k, v, w, ok)
			}
		}
		if !strings.Contains(r.stderr, "unreachable") {
			t.Errorf("stderr %q: want the stopped shard unreachable", r.stderr)
		}
	}
	t.Run("from the registry", func(t *testing.T) {
		// The proxy registered itself: its gateway and admin are checked
		// without being named.
		check(t)
	})
	t.Run("from arguments", func(t *testing.T) {
		check(t, f.sims["blue-1"].Addr, "zeebe="+f.sims["blue-2"].Addr, f.proxy.Addr, "registry="+f.regURL, "proxy="+f.admin)
	})
	t.Run("all healthy", func(t *testing.T) {
		r := runBin(t, bin, f.env, "", "probe", "health", f.sims["blue-1"].Addr, "proxy="+f.admin)
		if r.code != 0 || !strings.Contains(r.stdout, "HEALTHY") {
			t.Fatalf("exit %d: %s\n%s", r.code, r.stderr, r.stdout)
		}
	})
	t.Run("bad target", func(t *testing.T) {
		r := runBin(t, bin, f.env, "", "probe", "health", "etcd=http://x")
		if r.code != 2 || !strings.Contains(r.stderr, `unknown kind "etcd"`) {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
	})
}

// probe capacity against a simulated monolith offered past its knee from
// the first stage: the run stops on collapsing completions and says so;
// bad flags are usage errors, an unreachable target an error.
func TestProbeCapacity(t *testing.T) {
	t.Parallel()
	s := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--partitions", "1", "--capacity", "100", "--degrade", "--backlog-limit", "-1")
	r := runBinFor(t, 2*time.Minute, bin, baseEnv(), "", "probe", "capacity", "--target", s.Addr, "--warmup", "2s", "--start", "80", "--step", "50%", "--stage", "3s", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var rep capacity.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if !strings.HasPrefix(rep.StopReason, "completed ") || len(rep.Stages) < 2 || !rep.Stages[0].Warmup || rep.Target != s.Addr {
		t.Errorf("report %+v", rep)
	}
	for _, tt := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--target", s.Addr, "--step", "0%"}, 2, "--step"},
		{[]string{"--start", "5"}, 2, `"target" not set`},
		{[]string{"--target", "nohost"}, 2, "want HOST:PORT"},
		{[]string{"--target", s.Addr, "--process", "/nonexistent.bpmn"}, 1, "--process"},
		{[]string{"--target", "127.0.0.1:1", "--warmup", "0s", "--stage", "1s"}, 1, "deploy shardctl-capacity"},
	} {
		r := runBin(t, bin, baseEnv(), "", append([]string{"probe", "capacity"}, tt.args...)...)
		if r.code != tt.code || !strings.Contains(r.stderr, tt.err) {
			t.Errorf("%q: exit %d, want %d with %q: %s", tt.args, r.code, tt.code, tt.err, r.stderr)
		}
	}
}

// probe capacity over the REST API (--protocol rest) of a simulated
// monolith: the same stages, started and completed over REST, stopping on
// collapsing completions; a REST probe has no job stream.
func TestProbeCapacityOverREST(t *testing.T) {
	t.Parallel()
	s := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0",
		"--partitions", "1", "--capacity", "400", "--degrade", "--backlog-limit", "-1")
	rest := strings.TrimSuffix(strings.TrimPrefix(s.Line(t, "REST API on "), "http://"), "/v2")
	r := runBinFor(t, 2*time.Minute, bin, baseEnv(), "", "probe", "capacity", "--protocol", "rest", "--target", rest,
		"--warmup", "2s", "--start", "20", "--step", "90%", "--stage", "3s", "-o", "json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var rep capacity.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	// Below the knee the workers complete what was started, over REST;
	// past it completions collapse and the run stops.
	if !strings.HasPrefix(rep.StopReason, "completed ") || len(rep.Stages) < 3 || rep.Knee == 0 || rep.Stages[1].Completed == 0 {
		t.Errorf("report %+v", rep)
	}
	t.Logf("over REST: knee %.0f/s (stage %d), stopped: %s", rep.Knee, rep.KneeStage, rep.StopReason)
	for _, tt := range []struct {
		args []string
		err  string
	}{
		{[]string{"--target", rest, "--protocol", "soap"}, "--protocol"},
		{[]string{"--target", rest, "--protocol", "rest", "--stream"}, "no job stream"},
	} {
		r := runBin(t, bin, baseEnv(), "", append([]string{"probe", "capacity"}, tt.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tt.err) {
			t.Errorf("%q: exit %d, want 2 with %q: %s", tt.args, r.code, tt.err, r.stderr)
		}
	}
}

// Ctrl-C mid-run: the load stops, and what was measured is printed, the
// stage cut short included.
func TestProbeCapacityInterrupted(t *testing.T) {
	t.Parallel()
	s := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0")
	metrics := s.Line(t, "metrics on ")
	cmd := exec.Command(bin, "probe", "capacity", "--target", s.Addr, "--warmup", "1s", "--start", "20", "--stage", "1m")
	cmd.Env = baseEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupted once the load is under way (the first instances
	// created), which is the warm-up's second at most: the warm-up is
	// measured and the first stage is cut short however fast this
	// machine gets there.
	budget.Eventually(t, 30*time.Second, "the probe's first instances", func() bool {
		return simtest.Metric(t, metrics, "zeebe_element_instance_events_total", `action="activated"`, `type="PROCESS"`) > 0
	})
	time.Sleep(1500 * time.Millisecond)
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v: %s", err, errOut.String())
		}
	case <-time.After(budget.Of(20 * time.Second)):
		_ = cmd.Process.Kill()
		t.Fatal("probe capacity did not stop on SIGINT")
	}
	if !strings.Contains(out.String(), "warm-up") || !strings.Contains(out.String(), "stopped: interrupted") {
		t.Errorf("stdout %q: want the warm-up, the stage cut short and why it stopped", out.String())
	}
}
