package proxy

import (
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A shard that missed a deployment (OUT_OF_SERVICE and unreachable when
// it was made) is replayed it when the registry sets it UP again, before
// it takes an instance: it was set UP without it before, and every
// instance placed there failed.
func TestReplayOnReturn(t *testing.T) {
	sims := simtest.StartN(t, 2, sim.Config{Partitions: 1})
	cfgs := simtest.ShardConfigs(sims)
	p := startProxy(t, Config{Dynamic: true, Health: route.HealthConfig{Interval: -1}})
	cfgs[1].State = proxyapi.OutOfService
	p.Want(cfgs)
	shardsReady(t, p, 2)
	sims[1].Refuse()
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatalf("deploy with an OUT_OF_SERVICE shard unreachable: %v", err)
	}
	if err := sims[1].Resume(); err != nil {
		t.Fatal(err)
	}
	cfgs[1].State = proxyapi.Up
	p.Want(cfgs)
	// UP at once, it takes instances once the ledger is replayed to it.
	budget.Eventually(t, 5*time.Second, "shard-2 UP and replayed", func() bool {
		s := p.ShardByID("shard-2")
		return s.State() == proxyapi.Up && !s.NeedsReplay()
	})
	on2 := 0
	for range 40 {
		resp, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx)
		if err != nil {
			t.Fatalf("create after shard-2 came back: %v", err)
		}
		if slot, _ := keyslot.Split(resp.GetProcessInstanceKey()); slot == 2 {
			on2++
		}
	}
	if on2 == 0 {
		t.Error("no instance landed on shard-2")
	}
}
