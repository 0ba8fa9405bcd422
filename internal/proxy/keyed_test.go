package proxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

const errorProcess = bpmnHead + `<bpmn:error id="e1" errorCode="NO_STOCK"/>
<bpmn:process id="reserve" isExecutable="true">
<bpmn:startEvent id="start"/>
<bpmn:serviceTask id="reserveTask"><bpmn:extensionElements><zeebe:taskDefinition type="reserve" retries="1"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:boundaryEvent id="noStock" attachedToRef="reserveTask"><bpmn:errorEventDefinition errorRef="e1"/></bpmn:boundaryEvent>
<bpmn:serviceTask id="backorder"><bpmn:extensionElements><zeebe:taskDefinition type="backorder"/></bpmn:extensionElements></bpmn:serviceTask>
<bpmn:endEvent id="done"/><bpmn:endEvent id="backordered"/>
<bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="reserveTask"/>
<bpmn:sequenceFlow id="f2" sourceRef="reserveTask" targetRef="done"/>
<bpmn:sequenceFlow id="f3" sourceRef="noStock" targetRef="backorder"/>
<bpmn:sequenceFlow id="f4" sourceRef="backorder" targetRef="backordered"/>
</bpmn:process></bpmn:definitions>`

// activateOne polls the proxy until one job of the type comes.
func activateOne(t *testing.T, c zbc.Client, typ string) entities.Job {
	t.Helper()
	var got []entities.Job
	budget.Eventually(t, 10*time.Second, "a "+typ+" job", func() bool {
		jobs, err := c.NewActivateJobsCommand().JobType(typ).MaxJobsToActivate(1).Send(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = jobs
		return len(jobs) == 1
	})
	return got[0]
}

func TestKeyAddressedCallsThroughTheProxy(t *testing.T) {
	shards := simtest.StartN(t, 3, sim.Config{Partitions: 2})
	p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards)})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource([]byte(errorProcess), "reserve.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	shardOf := func(key int64) *sim.Sim {
		slot, _ := keyslot.Split(key)
		if slot < 1 || slot > 3 {
			t.Fatalf("key %d carries slot %d", key, slot)
		}
		return shards[slot-1]
	}

	// Fail to no retries, find the incident on the instance's shard,
	// update retries and resolve it through the proxy, then throw an error
	// the boundary event catches, and complete the error path.
	inst, err := c.NewCreateInstanceCommand().BPMNProcessId("reserve").LatestVersion().Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	job := activateOne(t, c, "reserve")
	if job.ProcessInstanceKey != inst.ProcessInstanceKey {
		t.Fatalf("job of instance %d, want %d", job.ProcessInstanceKey, inst.ProcessInstanceKey)
	}
	if s1, _ := keyslot.Split(job.Key); s1 != int(job.ProcessInstanceKey>>keyslot.Shift&keyslot.Bits) {
		t.Fatalf("job and instance keys carry different slots")
	}
	if _, err := c.NewUpdateJobTimeoutCommand().JobKey(job.Key).Timeout(time.Hour.Milliseconds()).Send(ctx); err != nil {
		t.Fatalf("update timeout: %v", err)
	}
	if _, err := c.NewFailJobCommand().JobKey(job.Key).Retries(0).ErrorMessage("broken").Send(ctx); err != nil {
		t.Fatal(err)
	}
	home := shardOf(inst.ProcessInstanceKey)
	incidents, err := home.Incidents(ctx)
	if err != nil || len(incidents) != 1 {
		t.Fatalf("incidents on the instance's shard: %v, %v", incidents, err)
	}
	slot, _ := keyslot.Split(inst.ProcessInstanceKey)
	if _, err := c.NewUpdateJobRetriesCommand().JobKey(job.Key).Retries(2).Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewResolveIncidentCommand().IncidentKey(keyslot.With(incidents[0].Key, slot)).Send(ctx); err != nil {
		t.Fatalf("resolve through the proxy: %v", err)
	}
	job = activateOne(t, c, "reserve")
	sv, _ := c.NewSetVariablesCommand().ElementInstanceKey(job.ElementInstanceKey).VariablesFromMap(map[string]any{"why": "sold out"})
	if resp, err := sv.Send(ctx); err != nil {
		t.Fatal(err)
	} else if s, _ := keyslot.Split(resp.GetKey()); s != slot {
		t.Errorf("set variables key carries slot %d, want %d", s, slot)
	}
	if _, err := c.NewThrowErrorCommand().JobKey(job.Key).ErrorCode("NO_STOCK").Send(ctx); err != nil {
		t.Fatal(err)
	}
	back := activateOne(t, c, "backorder")
	vars, _ := back.GetVariablesAsMap()
	if vars["why"] != "sold out" {
		t.Errorf("variables set through the proxy: %v", vars)
	}
	if _, err := c.NewCompleteJobCommand().JobKey(back.Key).Send(ctx); err != nil {
		t.Fatal(err)
	}

	// Cancel through the proxy.
	other, err := c.NewCreateInstanceCommand().BPMNProcessId("reserve").LatestVersion().Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(other.ProcessInstanceKey).Send(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(other.ProcessInstanceKey).Send(ctx); status.Code(err) != codes.NotFound {
		t.Errorf("cancelling twice: %v, want NOT_FOUND", err)
	}

	// Creating by the definition key the proxy returned works on any shard.
	def := inst.ProcessDefinitionKey
	for range 6 {
		r, err := c.NewCreateInstanceCommand().ProcessDefinitionKey(def).Send(ctx)
		if err != nil {
			t.Fatalf("create by definition key: %v", err)
		}
		if r.BpmnProcessId != "reserve" {
			t.Errorf("created %+v", r)
		}
	}

	// The RPCs the shards do not implement are still routed by key.
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	otherSlot := slot%3 + 1
	_, err = gw.ModifyProcessInstance(ctx, &pb.ModifyProcessInstanceRequest{ProcessInstanceKey: inst.ProcessInstanceKey,
		TerminateInstructions: []*pb.ModifyProcessInstanceRequest_TerminateInstruction{{ElementInstanceKey: keyslot.With(7, otherSlot)}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "one shard") {
		t.Errorf("a nested key of another shard: %v, want INVALID_ARGUMENT", err)
	}
	_, err = gw.ModifyProcessInstance(ctx, &pb.ModifyProcessInstanceRequest{ProcessInstanceKey: inst.ProcessInstanceKey})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "shard-") {
		t.Errorf("modify: %v, want the shard's UNIMPLEMENTED naming the shard", err)
	}

	// Keys without a slot, or of a slot nobody has.
	if _, err := c.NewCompleteJobCommand().JobKey(1<<51 + 5).Send(ctx); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "legacy shard") {
		t.Errorf("slot 0 without a legacy shard: %v", err)
	}
	if _, err := c.NewCompleteJobCommand().JobKey(keyslot.With(1<<51+5, 9)).Send(ctx); status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "slot 9") {
		t.Errorf("slot 9: %v", err)
	}
}

func TestLegacyShardServesUnslottedKeys(t *testing.T) {
	shards := simtest.StartN(t, 2, sim.Config{Partitions: 1})
	// A client worked against shard-1 directly before the cutover.
	direct := newClient(t, shards[0].Addr().String())
	ctx := budget.Context(t, 30*time.Second)
	if _, err := direct.NewDeployResourceCommand().AddResource(load.Process("old", "legacy-work"), "old.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := direct.NewCreateInstanceCommand().BPMNProcessId("old").LatestVersion().Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfgs := simtest.ShardConfigs(shards)
	p := startProxy(t, Config{Shards: cfgs, LegacyShard: cfgs[0].ID})
	c := newClient(t, p.Addr().String())
	// The key it stored still works through the proxy.
	if _, err := c.NewCancelInstanceCommand().ProcessInstanceKey(before.ProcessInstanceKey).Send(ctx); err != nil {
		t.Fatalf("cancel with a pre-cutover key: %v", err)
	}
	// And a definition key from before the proxy (not in its ledger) runs
	// where it was issued.
	again, err := c.NewCreateInstanceCommand().ProcessDefinitionKey(before.ProcessDefinitionKey).Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slot, _ := keyslot.Split(again.ProcessInstanceKey); slot != 1 {
		t.Errorf("instance of a legacy definition on slot %d, want 1", slot)
	}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// The in-memory ledger starts empty when a proxy restarts; definition keys
// clients kept from before still run, on the shard that issued them.
func TestDefinitionKeysSurviveAProxyRestart(t *testing.T) {
	shards := simtest.StartN(t, 2, sim.Config{Partitions: 1})
	first := startProxy(t, Config{Shards: simtest.ShardConfigs(shards)})
	c := newClient(t, first.Addr().String())
	ctx := budget.Context(t, 30*time.Second)
	dep, err := c.NewDeployResourceCommand().AddResource(load.Process("p", "a"), "p.bpmn").Send(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := dep.Deployments[0].GetProcess().ProcessDefinitionKey
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second := startProxy(t, Config{Shards: simtest.ShardConfigs(shards)})
	c2 := newClient(t, second.Addr().String())
	for range 3 {
		r, err := c2.NewCreateInstanceCommand().ProcessDefinitionKey(key).Send(ctx)
		if err != nil {
			t.Fatalf("create by a key from before the restart: %v", err)
		}
		if ks, _ := keyslot.Split(key); func() int { s, _ := keyslot.Split(r.ProcessInstanceKey); return s }() != ks {
			t.Errorf("instance on another shard than the one that issued the definition key")
		}
	}
}
