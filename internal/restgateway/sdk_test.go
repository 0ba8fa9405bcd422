package restgateway_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/restgateway/sdktest"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// TestCamundaSDK runs Camunda's SDK unchanged against the simulator, with
// its strict response validation on: every answer must match the schemas
// the SDK was generated from, or it throws.
func TestCamundaSDK(t *testing.T) {
	s, base := startREST(t, sim.Config{Partitions: 3})
	sdk := sdktest.New(t, base)
	const n = 5
	o := sdk.Workload(t, n)

	incidents, err := s.Incidents(budget.Context(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(incidents) != 1 || strconv.FormatInt(incidents[0].JobKey, 10) != o.FailedJob {
		t.Fatalf("incidents %+v: want one, of job %s", incidents, o.FailedJob)
	}
	sdk.Resolve(t, o.FailedJob, strconv.FormatInt(incidents[0].Key, 10))

	// The engine saw what the SDK did: every instance completed but the
	// cancelled one — those of "three", the waiting, the signalled and
	// the failing one.
	if got := simtest.SimMetric(t, s, "zeebe_element_instance_events_total", `action="completed"`, `type="PROCESS"`); got != n+4 {
		t.Errorf("process instances completed: %v, want %d", got, n+4)
	}
	if got := simtest.SimMetric(t, s, "zeebe_element_instance_events_total", `action="terminated"`, `type="PROCESS"`); got != 1 {
		t.Errorf("process instances terminated: %v, want 1", got)
	}
}

// TestC8ctl runs Camunda's CLI against the simulator (sdktest's C8ctl
// workload); the engine sees what it did.
func TestC8ctl(t *testing.T) {
	s, base := startREST(t, sim.Config{Partitions: 3})
	const n = 3
	sdktest.NewC8ctl(t, base).Workload(t, n, func(_, job string) string {
		incidents, err := s.Incidents(budget.Context(t, 10*time.Second))
		if err != nil || len(incidents) != 1 || strconv.FormatInt(incidents[0].JobKey, 10) != job {
			t.Fatalf("incidents %+v (%v): want one, of job %s", incidents, err, job)
		}
		return strconv.FormatInt(incidents[0].Key, 10)
	})
	// Every instance completed but the cancelled one: those of "three",
	// the waiting, the failing and the awaited one.
	if got := simtest.SimMetric(t, s, "zeebe_element_instance_events_total", `action="completed"`, `type="PROCESS"`); got != n+3 {
		t.Errorf("process instances completed: %v, want %d", got, n+3)
	}
	if got := simtest.SimMetric(t, s, "zeebe_element_instance_events_total", `action="terminated"`, `type="PROCESS"`); got != 1 {
		t.Errorf("process instances terminated: %v, want 1", got)
	}
}
