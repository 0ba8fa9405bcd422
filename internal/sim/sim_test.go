package sim

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
)

func TestTopologyAndKeys(t *testing.T) {
	s := startSim(t, Config{Partitions: 3})
	c := newClient(t, s)
	ctx := budget.Context(t, 10*time.Second)
	topo, err := c.NewTopologyCommand().Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topo.PartitionsCount != 3 || len(topo.Brokers) != 1 || len(topo.Brokers[0].Partitions) != 3 || topo.GatewayVersion != DefaultVersion.Release() {
		t.Fatalf("topology %+v", topo)
	}
	dep, err := c.NewDeployResourceCommand().AddResource(linearProcess("p", 3, "a"), "p.bpmn").Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Deployments are keyed on partition 1: the deployment, then the
	// process definition.
	if dep.Key != 1<<51+1 || dep.Deployments[0].GetProcess().ProcessDefinitionKey != 1<<51+2 {
		t.Errorf("deployment keys %d, %d", dep.Key, dep.Deployments[0].GetProcess().ProcessDefinitionKey)
	}
	// Instances go round-robin over the partitions; each partition's keys
	// start at partitionId<<51 + 1.
	seen := map[int32]bool{}
	for range 6 {
		inst, err := c.NewCreateInstanceCommand().BPMNProcessId("p").LatestVersion().Send(ctx)
		if err != nil {
			t.Fatal(err)
		}
		part := PartitionOfKey(inst.ProcessInstanceKey)
		if part < 1 || part > 3 {
			t.Fatalf("instance key %d names partition %d", inst.ProcessInstanceKey, part)
		}
		if !seen[part] && part != 1 && inst.ProcessInstanceKey != int64(part)<<51+1 {
			t.Errorf("first key on partition %d = %d, want %d", part, inst.ProcessInstanceKey, int64(part)<<51+1)
		}
		seen[part] = true
	}
	if len(seen) != 3 {
		t.Errorf("instances landed on partitions %v, want all three", seen)
	}
}

func TestHundredsOfInstancesToTheEnd(t *testing.T) {
	s := startSim(t, Config{Partitions: 3, Exporter: "elasticsearch"})
	c := newClient(t, s)
	ctx := budget.Context(t, 60*time.Second)
	if _, err := c.NewDeployResourceCommand().AddResource(linearProcess("order", 3, "reserve", "charge", "ship"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 300
	var completed atomic.Int64
	for _, typ := range []string{"reserve", "charge", "ship"} {
		w := c.NewJobWorker().JobType(typ).Handler(func(jc worker.JobClient, job entities.Job) {
			vars, _ := job.GetVariablesAsMap()
			vars[job.Type] = true
			cmd, _ := jc.NewCompleteJobCommand().JobKey(job.Key).VariablesFromMap(vars)
			if _, err := cmd.Send(context.Background()); err == nil {
				completed.Add(1)
			}
		}).MaxJobsActive(64).Concurrency(8).PollInterval(20 * time.Millisecond).RequestTimeout(time.Second).BackoffSupplier(load.Backoff()).Open()
		t.Cleanup(w.Close)
	}
	for i := range n {
		cmd, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().VariablesFromMap(map[string]any{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cmd.Send(ctx); err != nil {
			t.Fatal(err)
		}
	}
	budget.Eventually(t, 45*time.Second, "every instance to complete", func() bool {
		return scrape(t, s, "zeebe_element_instance_events_total", `action="completed"`, `type="PROCESS"`) == n
	})
	if got := completed.Load(); got != 3*n {
		t.Errorf("%d jobs completed, want %d", got, 3*n)
	}
	if got := scrape(t, s, "zeebe_executed_instances_total", `action="completed"`); got != n {
		t.Errorf("zeebe_executed_instances_total completed = %v, want %d", got, n)
	}
	if got := scrape(t, s, "zeebe_job_events_total", `action="completed"`, `type="charge"`); got != n {
		t.Errorf("charge jobs completed = %v, want %d", got, n)
	}
	// The exporter keeps up with processing: no lag once all is processed.
	budget.Eventually(t, 5*time.Second, "the exporter to reach the processed position", func() bool {
		return scrape(t, s, "zeebe_exporter_last_exported_position", `exporter="elasticsearch"`) ==
			scrape(t, s, "zeebe_stream_processor_last_processed_position")
	})
}
