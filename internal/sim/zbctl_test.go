package sim_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

const orderProcess = `<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" xmlns:zeebe="http://camunda.org/schema/zeebe/1.0" id="d" targetNamespace="t">
<bpmn:process id="order" isExecutable="true">
<bpmn:startEvent id="start"/>
<bpmn:serviceTask id="pack"><bpmn:extensionElements><zeebe:taskDefinition type="pack"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:endEvent id="end"/>
<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="pack"/>
<bpmn:sequenceFlow id="f2" sourceRef="pack" targetRef="end"/>
</bpmn:process></bpmn:definitions>`

func runZbctl(t *testing.T, zbctl string, s *sim.Sim, args ...string) string {
	t.Helper()
	ctx := budget.Context(t, 30*time.Second)
	cmd := exec.CommandContext(ctx, zbctl, append(args, "--address", s.Addr().String(), "--insecure")...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("zbctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestZbctl(t *testing.T) {
	zbctl := simtest.Zbctl(t)
	s := simtest.Start(t, sim.Config{Partitions: 3})

	status := runZbctl(t, zbctl, s, "status")
	for _, want := range []string{"Cluster size: 1", "Partitions count: 3", "Gateway version: " + sim.DefaultVersion.Release(), "Partition 3 : Leader, Healthy"} {
		if !strings.Contains(status, want) {
			t.Errorf("zbctl status lacks %q:\n%s", want, status)
		}
	}

	file := filepath.Join(t.TempDir(), "order.bpmn")
	if err := os.WriteFile(file, []byte(orderProcess), 0o644); err != nil {
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
	budget.Eventually(t, 5*time.Second, "the instance to complete", func() bool {
		return simtest.SimMetric(t, s, "zeebe_executed_instances_total", `action="completed"`) == 1
	})
}
