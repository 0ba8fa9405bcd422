package sdktest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/npmtest"
)

// Camunda's CLI for the REST API.
const (
	C8ctlPackage = "@camunda8/cli"
	C8ctlVersion = "4.1.0"
)

// c8ctl 4.1.0 depends on the SDK ^10.0.0-alpha.43, which the package
// registry here does not serve (it has 9.1.5 as the newest). So it is
// installed with npm overrides over the SDK at Version, through a shim
// that adds the four names c8ctl imports and 9.1.5 lacks: GroupId,
// RoleId and MappingRuleId (branded ids of the identity commands) and
// WaitStateTypeEnum (a search filter's). The commands tested here use
// none of them; c8ctl's own code runs unchanged, its requests built by
// SDK 9.1.5.
var c8ctlFiles = map[string][]byte{
	"package.json": []byte(`{"private": true, "dependencies": {"` + C8ctlPackage + `": "` + C8ctlVersion + `"},
 "overrides": {"` + Package + `": "file:./sdk-shim"}}
`),
	"sdk-shim/package.json": []byte(`{"name": "` + Package + `", "version": "10.0.0-shim.` + Version + `", "type": "module",
 "exports": {".": "./index.js"}, "dependencies": {"sdk": "npm:` + Package + `@` + Version + `"}}
`),
	"sdk-shim/index.js": []byte(`export * from "sdk";
const id = { assumeExists: (v) => v, getValue: (v) => v, isValid: () => true };
export const GroupId = id, RoleId = id, MappingRuleId = id;
export const WaitStateTypeEnum = { JOB: "JOB", MESSAGE: "MESSAGE", TIMER: "TIMER", CONDITION: "CONDITION", USER_TASK: "USER_TASK", SIGNAL: "SIGNAL" };
`),
}

// C8ctl runs c8ctl against one REST API.
type C8ctl struct {
	entry, base, data string
}

// NewC8ctl installs c8ctl (once per machine) to run against the REST
// API at base (http://HOST:PORT).
func NewC8ctl(t *testing.T, base string) *C8ctl {
	t.Helper()
	checkNode(t, C8ctlPackage, C8ctlVersion)
	modules := npmtest.Project(t, "c8ctl-"+C8ctlVersion, C8ctlPackage, C8ctlVersion, c8ctlFiles)
	return &C8ctl{entry: filepath.Join(modules, C8ctlPackage, "dist", "index.js"), base: base, data: t.TempDir()}
}

// Status is one of the JSON lines c8ctl writes on stderr with --json.
type Status struct {
	Status, Message, Key, Error string
}

// Run runs c8ctl with args (--json added) and returns what it printed on
// stdout, its status lines, and whether it exited 0.
func (c *C8ctl) Run(t *testing.T, args ...string) (stdout []byte, status []Status, ok bool) {
	t.Helper()
	ctx := budget.Context(t, time.Minute)
	cmd := exec.CommandContext(ctx, "node", append([]string{c.entry}, append(args, "--json")...)...)
	cmd.Dir = c.data
	cmd.Env = append(npmtest.Env(), "CAMUNDA_BASE_URL="+c.base, "C8CTL_DATA_DIR="+c.data, "HOME="+c.data, "CI=1", "NODE_NO_WARNINGS=1")
	cmd.WaitDelay = 5 * time.Second
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("c8ctl %v: %v (out of time)\n%s\n%s", args, err, stdout, errOut.Bytes())
	}
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatalf("c8ctl %v: %v", args, err)
	}
	sc := bufio.NewScanner(&errOut)
	for sc.Scan() {
		var s Status
		if json.Unmarshal(sc.Bytes(), &s) == nil && s.Status != "" {
			status = append(status, s)
		}
	}
	return stdout, status, err == nil
}

// MustRun is Run for a command that must succeed; it returns stdout and
// the key of its last status line that has one.
func (c *C8ctl) MustRun(t *testing.T, args ...string) (stdout []byte, key string) {
	t.Helper()
	stdout, status, ok := c.Run(t, args...)
	if !ok {
		t.Fatalf("c8ctl %v failed: %+v\n%s", args, status, stdout)
	}
	for _, s := range status {
		if s.Key != "" {
			key = s.Key
		}
	}
	return stdout, key
}

// C8ctlOutcome is what C8ctl's workload did, keys as c8ctl printed them.
type C8ctlOutcome struct {
	// Instances of "three", their jobs completed; Waiting, completed by
	// the message; Failing, whose job FailedJob failed to an incident and
	// was completed once it was resolved; Awaited, an instance of "now"
	// started with awaitCompletion; Cancelled, an instance of "three".
	Instances                                       []string
	Waiting, Failing, FailedJob, Awaited, Cancelled string
}

// Workload is what an operator does with c8ctl: it deploys Files and
// "now" (a process that ends as it starts) in one deployment, starts n
// instances of "three" and one each of "wait" and "fail", cancels a
// further one of "three", awaits one of "now", activates and completes
// every job of ThreeTypes (each once), publishes the message "wait"
// waits for, fails the job of "fail" to an incident, then gives it a
// retry, resolves the incident (its key is incident's, given the
// failing instance's key: an operator reads it in Operate) and completes
// it.
func (c *C8ctl) Workload(t *testing.T, n int, incident func(instance, job string) string) C8ctlOutcome {
	t.Helper()
	files := Files()
	files["now.bpmn"] = load.Process("now")
	paths := writeFiles(t, t.TempDir(), files)
	out, _ := c.MustRun(t, append([]string{"deploy", "--yes"}, paths...)...)
	var deployed []struct{ ID string }
	if err := json.Unmarshal(out, &deployed); err != nil {
		t.Fatalf("deploy printed %s: %v", out, err)
	}
	var ids []string
	for _, d := range deployed {
		ids = append(ids, d.ID)
	}
	if slices.Sort(ids); strings.Join(ids, ",") != "fail,now,signal,three,wait" {
		t.Errorf("deployed %v, want fail, now, signal, three and wait", ids)
	}

	var o C8ctlOutcome
	create := func(args ...string) string {
		t.Helper()
		_, key := c.MustRun(t, append([]string{"create", "pi"}, args...)...)
		return key
	}
	for range n {
		o.Instances = append(o.Instances, create("--id=three", `--variables={"i":1}`))
	}
	o.Waiting = create("--id=wait", `--variables={"orderId":"c8-1"}`)
	o.Failing = create("--id=fail")
	o.Cancelled = create("--id=three")
	c.MustRun(t, "cancel", "pi", o.Cancelled)

	out, _ = c.MustRun(t, "await", "pi", "--id=now", `--variables={"a":1}`)
	var awaited struct {
		ProcessInstanceKey string
		Variables          map[string]any
	}
	if err := json.Unmarshal(out, &awaited); err != nil || awaited.Variables["a"] != 1.0 {
		t.Errorf("await printed %s (%v): want the instance with its variables", out, err)
	}
	o.Awaited = awaited.ProcessInstanceKey

	for _, typ := range ThreeTypes {
		done := map[string]bool{}
		for try := 0; len(done) < n; try++ {
			if try == 10 {
				t.Fatalf("%s: %d jobs completed after %d activations, want %d", typ, len(done), try, n)
			}
			for _, k := range c.Activate(t, typ) {
				if done[k] {
					t.Fatalf("%s: job %s activated twice", typ, k)
				}
				done[k] = true
				c.MustRun(t, "complete", "job", k)
			}
		}
	}
	c.MustRun(t, "publish", "msg", "sdk-paid", "--correlationKey=c8-1")

	jobs := c.Activate(t, FailType)
	if len(jobs) != 1 {
		t.Fatalf("jobs of %s: %v, want one", FailType, jobs)
	}
	o.FailedJob = jobs[0]
	c.MustRun(t, "fail", "job", o.FailedJob, "--retries=0", "--errorMessage=boom")
	inc := incident(o.Failing, o.FailedJob)
	c.MustRun(t, "update", "job", o.FailedJob, "--retries=1")
	c.MustRun(t, "resolve", "inc", inc)
	if again := c.Activate(t, FailType); len(again) != 1 || again[0] != o.FailedJob {
		t.Fatalf("after the incident: jobs %v, want %s again", again, o.FailedJob)
	}
	c.MustRun(t, "complete", "job", o.FailedJob)
	return o
}

// Activate activates the jobs of typ and returns their keys.
func (c *C8ctl) Activate(t *testing.T, typ string) []string {
	t.Helper()
	out, _ := c.MustRun(t, "activate", "jobs", typ, "--maxJobsToActivate=50", "--timeout=60000")
	var jobs []struct{ Key string }
	if err := json.Unmarshal(out, &jobs); err != nil {
		t.Fatalf("activate jobs %s printed %s: %v", typ, out, err)
	}
	keys := make([]string, 0, len(jobs))
	for _, j := range jobs {
		keys = append(keys, j.Key)
	}
	return keys
}
