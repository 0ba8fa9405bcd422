package restfront_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/npmtest"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// Camunda's official TypeScript SDK for the REST API, the client Camunda
// recommends from 8.8 on.
const (
	sdkPackage = "@camunda8/orchestration-cluster-api"
	sdkVersion = "9.1.5"
	minNode    = 20
)

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestCamundaSDK runs the SDK unchanged against the simulator, with its
// strict response validation on: every answer must match the schemas the
// SDK was generated from, or it throws.
func TestCamundaSDK(t *testing.T) {
	modules := npmtest.Modules(t, sdkPackage, sdkVersion)
	// The SDK declares Node 22 and runs on 20, the node of the machines
	// this suite runs on; older (Debian bookworm's 18) is untried. Say so
	// plainly rather than fail somewhere inside node.
	ver, err := exec.Command("node", "--version").Output()
	if major, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(ver)), "v"), "."); err != nil || atoi(major) < minNode {
		t.Fatalf("node %s (%v): %s@%s needs Node.js %d or later; install NodeSource's nodejs", strings.TrimSpace(string(ver)), err, sdkPackage, sdkVersion, minNode)
	}
	s, base := startREST(t, sim.Config{Partitions: 3})

	// An ES module finds its imports in a node_modules beside it.
	dir := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("testdata", "sdk.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	bpmn := filepath.Join(dir, "sdk.bpmn")
	for name, b := range map[string][]byte{"sdk.mjs": script, "sdk.bpmn": load.Process("sdk", "sdk-task")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const instances = 5
	ctx := budget.Context(t, 2*time.Minute)
	cmd := exec.CommandContext(ctx, "node", "sdk.mjs", bpmn, strconv.Itoa(instances))
	cmd.Dir = dir
	cmd.Env = append(npmtest.Env(), "CAMUNDA_REST_ADDRESS="+base, "CAMUNDA_AUTH_STRATEGY=NONE",
		"CAMUNDA_SDK_LOG_LEVEL=error", "CAMUNDA_SDK_VALIDATION=req:strict,res:strict", "HOME="+dir)
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the SDK failed: %v\n%s\n%s", err, stdout, stderr)
	}
	var out struct {
		DeploymentKey, Awaited, Cancelled, MessageKey string
		Instances                                     []string
		AwaitedVariables                              map[string]any
		Jobs, Twice                                   int
	}
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("the SDK printed %q: %v", stdout, err)
	}
	if len(out.Instances) != instances || out.Jobs != instances+1 || out.Twice != 0 {
		t.Errorf("instances %v, jobs %d (%d twice): want %d instances and every job once", out.Instances, out.Jobs, out.Twice, instances+1)
	}
	if out.AwaitedVariables["handled"] != true || out.AwaitedVariables["i"] != -1.0 {
		t.Errorf("awaited instance's variables %v: want the job's result beside its start", out.AwaitedVariables)
	}
	if out.Cancelled == "" || out.MessageKey == "" || out.DeploymentKey == "" {
		t.Errorf("cancelled %q, message %q, deployment %q: want keys", out.Cancelled, out.MessageKey, out.DeploymentKey)
	}
	// The engine saw what the SDK did: six instances completed, one
	// terminated.
	if n := simtest.SimMetric(t, s, "zeebe_element_instance_events_total", `action="completed"`, `type="PROCESS"`); n != instances+1 {
		t.Errorf("process instances completed: %v, want %d", n, instances+1)
	}
	if n := simtest.SimMetric(t, s, "zeebe_element_instance_events_total", `action="terminated"`, `type="PROCESS"`); n != 1 {
		t.Errorf("process instances terminated: %v, want 1", n)
	}
}
