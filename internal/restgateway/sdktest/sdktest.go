// Package sdktest runs Camunda's official TypeScript SDK for the REST API
// (npm @camunda8/orchestration-cluster-api), unchanged, against a REST
// gateway — the simulator's or the proxy's — with its strict validation
// of requests and responses on: an answer that does not match the
// schemas the SDK was generated from makes it throw. The workload is
// workload.mjs; its phases print JSON. Tests only.
package sdktest

import (
	_ "embed"
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
)

// The SDK Camunda recommends from 8.8 on, and the oldest Node.js it runs
// on here (it declares 22 and runs on 20, the node of the machines this
// suite runs on; Debian bookworm's 18 is untried).
const (
	Package = "@camunda8/orchestration-cluster-api"
	Version = "9.1.5"
	minNode = 20
)

//go:embed workload.mjs
var workload []byte

// Job types of the processes in Files: "three" runs one job of each of
// ThreeTypes in turn; "fail" one of FailType.
var (
	ThreeTypes = []string{"sdk-a", "sdk-b", "sdk-c"}
	FailType   = "sdk-fail"
)

// Files are the BPMN files the workload deploys, in one deployment:
// "three" (three service tasks), "wait" (a message catch event, name
// sdk-paid, correlated by orderId), "signal" (a signal catch event,
// sdk-go) and "fail" (one task, whose job the workload fails).
func Files() map[string][]byte {
	return map[string][]byte{
		"three.bpmn": load.Process("three", ThreeTypes...),
		"fail.bpmn":  load.Process("fail", FailType),
		"wait.bpmn": []byte(load.DefinitionsHead + `<bpmn:message id="m" name="sdk-paid"><bpmn:extensionElements><zeebe:subscription correlationKey="=orderId"/></bpmn:extensionElements></bpmn:message>
<bpmn:process id="wait" isExecutable="true"><bpmn:startEvent id="start"/>
<bpmn:intermediateCatchEvent id="paid"><bpmn:messageEventDefinition messageRef="m"/></bpmn:intermediateCatchEvent>
<bpmn:endEvent id="end"/><bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="paid"/><bpmn:sequenceFlow id="f2" sourceRef="paid" targetRef="end"/>
</bpmn:process></bpmn:definitions>`),
		"signal.bpmn": []byte(load.DefinitionsHead + `<bpmn:signal id="s" name="sdk-go"/>
<bpmn:process id="signal" isExecutable="true"><bpmn:startEvent id="start"/>
<bpmn:intermediateCatchEvent id="go"><bpmn:signalEventDefinition signalRef="s"/></bpmn:intermediateCatchEvent>
<bpmn:endEvent id="end"/><bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="go"/><bpmn:sequenceFlow id="f2" sourceRef="go" targetRef="end"/>
</bpmn:process></bpmn:definitions>`),
	}
}

// SDK is the SDK installed and a directory to run the workload in.
type SDK struct {
	dir, base string
	// Env is added to the SDK's environment, over its defaults (an
	// OAuth login: CAMUNDA_AUTH_STRATEGY=OAUTH, CAMUNDA_CLIENT_ID, …).
	Env []string
}

// New installs the SDK (once per machine) and prepares the workload
// against the REST API at base (http://HOST:PORT, or …/v2).
func New(t *testing.T, base string) *SDK {
	t.Helper()
	modules := npmtest.Modules(t, Package, Version)
	checkNode(t, Package, Version)
	dir := t.TempDir()
	// An ES module finds its imports in a node_modules beside it.
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	files := Files()
	files["workload.mjs"] = workload
	writeFiles(t, dir, files)
	return &SDK{dir: dir, base: base}
}

// writeFiles writes files into dir and returns their paths.
func writeFiles(t *testing.T, dir string, files map[string][]byte) []string {
	t.Helper()
	paths, err := npmtest.WriteFiles(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// checkNode fails the test when node is older than minNode.
func checkNode(t *testing.T, pkg, version string) {
	t.Helper()
	ver, err := exec.Command("node", "--version").Output()
	major, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(string(ver)), "v"), ".")
	if n, _ := strconv.Atoi(major); err != nil || n < minNode {
		t.Fatalf("node %s (%v): %s@%s needs Node.js %d or later; install NodeSource's nodejs", strings.TrimSpace(string(ver)), err, pkg, version, minNode)
	}
}

// Run runs one phase of the workload and returns what it printed.
func (s *SDK) Run(t *testing.T, phase string, args ...string) []byte {
	t.Helper()
	return s.run(t, 2*time.Minute, phase, args...)
}

func (s *SDK) run(t *testing.T, limit time.Duration, phase string, args ...string) []byte {
	t.Helper()
	ctx := budget.Context(t, limit)
	cmd := exec.CommandContext(ctx, "node", append([]string{"workload.mjs", phase}, args...)...)
	cmd.Dir = s.dir
	cmd.Env = append(npmtest.Env(), "CAMUNDA_REST_ADDRESS="+s.base, "CAMUNDA_AUTH_STRATEGY=NONE",
		"CAMUNDA_SDK_LOG_LEVEL=error", "CAMUNDA_SDK_VALIDATION=req:strict,res:strict", "HOME="+s.dir)
	cmd.Env = append(cmd.Env, s.Env...) // the last of a name counts
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("the SDK's %s failed: %v\n%s\n%s", phase, err, stdout, stderr)
	}
	return stdout
}

// Outcome is what the workload's run phase did, keys as the SDK saw them.
type Outcome struct {
	GatewayVersion, DeploymentKey string
	Processes                     []string
	// Instances of "three" completed by the SDK's workers, and Awaited,
	// started with awaitCompletion.
	Instances        []string
	Awaited          string
	AwaitedVariables map[string]any
	// Jobs completed, and how many of them came twice.
	Jobs, Twice int
	// Cancelled: an instance of "three"; Waiting, completed by the
	// message MessageKey; Signalled, by the signal SignalKey; Failing,
	// whose job FailedJob failed to an incident.
	Cancelled, Waiting, MessageKey, Signalled, SignalKey, Failing, FailedJob string
}

// Workload deploys Files and runs n instances of "three" through the
// SDK, then the message, signal, cancellation and failure; it checks what
// the SDK reported.
func (s *SDK) Workload(t *testing.T, n int) Outcome {
	t.Helper()
	var o Outcome
	decode(t, s.Run(t, "run", strconv.Itoa(n)), &o)
	if want := []string{"fail", "signal", "three", "wait"}; strings.Join(o.Processes, ",") != strings.Join(want, ",") {
		t.Errorf("deployed %v, want %v", o.Processes, want)
	}
	if len(o.Instances) != n || o.Jobs != 3*(n+1) || o.Twice != 0 {
		t.Errorf("instances %v, jobs %d (%d twice): want %d instances and each of their %d jobs once", o.Instances, o.Jobs, o.Twice, n+1, 3*(n+1))
	}
	if o.AwaitedVariables["handled"] != true || o.AwaitedVariables["i"] != -1.0 {
		t.Errorf("awaited instance's variables %v: want its jobs' result beside its start", o.AwaitedVariables)
	}
	for name, k := range map[string]string{"deployment": o.DeploymentKey, "awaited": o.Awaited, "cancelled": o.Cancelled,
		"waiting": o.Waiting, "message": o.MessageKey, "signalled": o.Signalled, "signal": o.SignalKey, "failing": o.Failing, "failed job": o.FailedJob} {
		if _, err := strconv.ParseInt(k, 10, 64); err != nil {
			t.Errorf("%s key %q: want a key", name, k)
		}
	}
	return o
}

// Resolve gives the failed job a retry, resolves its incident and
// completes the job, all through the SDK.
func (s *SDK) Resolve(t *testing.T, job, incident string) {
	t.Helper()
	var out struct {
		Jobs  []string
		Twice int
	}
	decode(t, s.Run(t, "resolve", job, incident), &out)
	if len(out.Jobs) != 1 || out.Jobs[0] != job || out.Twice != 0 {
		t.Errorf("after the incident: completed %v (%d twice), want %s once", out.Jobs, out.Twice, job)
	}
}

// Create starts n instances of "three" and returns their keys.
func (s *SDK) Create(t *testing.T, n int) []string {
	t.Helper()
	var out struct{ Instances []string }
	decode(t, s.Run(t, "create", strconv.Itoa(n)), &out)
	return out.Instances
}

// Work completes n jobs of ThreeTypes with the SDK's workers and returns
// their keys; a job that came twice fails the test.
func (s *SDK) Work(t *testing.T, n int) []string {
	t.Helper()
	var out struct {
		Jobs  []string
		Twice int
	}
	decode(t, s.Run(t, "work", strconv.Itoa(n)), &out)
	if len(out.Jobs) != n || out.Twice != 0 {
		t.Errorf("the SDK's workers completed %d jobs (%d twice), want %d once", len(out.Jobs), out.Twice, n)
	}
	return out.Jobs
}

// Steady is what the steady phase did: the instances it created (their
// keys), how many of them the SDK's workers completed, and the creations
// that failed (the first few errors).
type Steady struct {
	Created       []string
	Completed     int
	Failed, Twice int
	Errors        []string
}

// Steady starts rate instances of "three" a second for d, or until a file
// stopFile exists ("": for d), while the SDK's workers complete them, and
// then waits for every one (60 s at most).
func (s *SDK) Steady(t *testing.T, rate int, d time.Duration, stopFile string) Steady {
	t.Helper()
	var out Steady
	args := []string{strconv.Itoa(rate), strconv.Itoa(int(d.Seconds()))}
	if stopFile != "" {
		args = append(args, stopFile)
	}
	decode(t, s.run(t, d+3*time.Minute, "steady", args...), &out)
	return out
}

// Deploy deploys "three".
func (s *SDK) Deploy(t *testing.T) {
	t.Helper()
	s.Run(t, "deploy")
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("the SDK printed %q: %v", b, err)
	}
}
