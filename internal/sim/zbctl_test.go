package sim

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// zbctlPath finds zbctl v8.5.20: $ZBCTL, else the copy scripts/tools.sh
// builds once per machine from the Go module proxy.
func zbctlPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ZBCTL"); p != "" {
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "../../scripts/tools.sh", "zbctl").Output()
	if err != nil {
		t.Fatalf("build zbctl with scripts/tools.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func runZbctl(t *testing.T, zbctl string, s *Sim, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, zbctl, append(args, "--address", s.Addr().String(), "--insecure")...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("zbctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestZbctl(t *testing.T) {
	zbctl := zbctlPath(t)
	s := startSim(t, Config{Partitions: 3})

	status := runZbctl(t, zbctl, s, "status")
	for _, want := range []string{"Cluster size: 1", "Partitions count: 3", "Gateway version: " + GatewayVersion, "Partition 3 : Leader, Healthy"} {
		if !strings.Contains(status, want) {
			t.Errorf("zbctl status lacks %q:\n%s", want, status)
		}
	}

	file := filepath.Join(t.TempDir(), "order.bpmn")
	if err := os.WriteFile(file, linearProcess("order", 3, "pack"), 0o644); err != nil {
		t.Fatal(err)
	}
	var deployed struct {
		Key         string `json:"key"`
		Deployments []struct {
			Process struct {
				BpmnProcessID string `json:"bpmnProcessId"`
				Version       int    `json:"version"`
			} `json:"process"`
		} `json:"deployments"`
	}
	out := runZbctl(t, zbctl, s, "deploy", "resource", file)
	if err := json.Unmarshal([]byte(out), &deployed); err != nil {
		t.Fatalf("zbctl deploy output: %v\n%s", err, out)
	}
	if len(deployed.Deployments) != 1 || deployed.Deployments[0].Process.BpmnProcessID != "order" || deployed.Deployments[0].Process.Version != 1 {
		t.Errorf("deployed %+v", deployed)
	}

	var created struct {
		ProcessInstanceKey string `json:"processInstanceKey"`
		BpmnProcessID      string `json:"bpmnProcessId"`
	}
	out = runZbctl(t, zbctl, s, "create", "instance", "order", "--variables", `{"orderId":"o-1"}`)
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("zbctl create output: %v\n%s", err, out)
	}
	if created.BpmnProcessID != "order" || created.ProcessInstanceKey == "" {
		t.Errorf("created %+v", created)
	}

	out = runZbctl(t, zbctl, s, "activate", "jobs", "pack", "--maxJobsToActivate", "1")
	var jobs struct {
		Jobs []struct {
			Key       string `json:"key"`
			Variables string `json:"variables"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(out), &jobs); err != nil || len(jobs.Jobs) != 1 || !strings.Contains(jobs.Jobs[0].Variables, "o-1") {
		t.Fatalf("zbctl activate jobs: %v\n%s", err, out)
	}
	runZbctl(t, zbctl, s, "complete", "job", jobs.Jobs[0].Key)
	eventually(t, 5*time.Second, "the instance to complete", func() bool { return activeInstances(t, s) == 0 })
}
