package proxy

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// Pool weights place new instances between pools by weight, and over
// the shards of a pool by power-of-two-choices; a pool of weight 0, or not
// named, gets none; without weights every shard takes its share.
func TestPoolWeights(t *testing.T) {
	shards := simtest.StartN(t, 4, sim.Config{Partitions: 1})
	cfgs := simtest.ShardConfigs(shards)
	for i := range cfgs {
		cfgs[i].Pool = []string{"blue", "blue", "green", "green"}[i]
	}
	p := startProxy(t, Config{Shards: cfgs})
	c := newClient(t, p.Addr().String())
	ctx := budget.Context(t, time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	poolOf := map[int]string{1: "blue", 2: "blue", 3: "green", 4: "green"}
	place := func(n int) (map[string]int, map[int]int) {
		pools, slots := map[string]int{}, map[int]int{}
		for range n {
			resp, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx)
			if err != nil {
				t.Fatal(err)
			}
			slot, _ := keyslot.Split(resp.GetProcessInstanceKey())
			pools[poolOf[slot]]++
			slots[slot]++
		}
		return pools, slots
	}
	const n = 600
	// Every shard's placement latency measured before the shares are:
	// the first calls to a shard are its slowest.
	place(100)
	// What each slot got over every case, against what its pool got.
	gotSlot, gotPool := map[int]int{}, map[string]int{}
	for _, tc := range []struct {
		weights map[string]int
		green   float64 // expected share
	}{
		// Without weights the proxy draws two shards of all four and
		// takes the one several times faster lately, so on a busy
		// machine a shard's slow moment moves instances to the others:
		// about half, not exactly.
		{nil, 0.5},
		{map[string]int{"blue": 90, "green": 10}, 0.10},
		{map[string]int{"blue": 50, "green": 50}, 0.50},
		{map[string]int{"blue": 0, "green": 100}, 1},
		{map[string]int{"green": 100}, 1},
	} {
		t.Run(fmt.Sprint(tc.weights), func(t *testing.T) {
			p.SetWeights(tc.weights)
			pools, slots := place(n)
			share := float64(pools["green"]) / n
			// Pools are drawn at random by weight: four standard
			// deviations of that draw (none when a pool has it all).
			tolerance := 4 * math.Sqrt(tc.green*(1-tc.green)/n)
			if tc.weights == nil {
				tolerance = 0.12
			}
			if share < tc.green-tolerance || share > tc.green+tolerance {
				t.Errorf("green got %.0f%% of %d new instances, want %.0f%% ± %.0f (%v)", share*100, n, tc.green*100, tolerance*100, pools)
			}
			for slot, k := range slots {
				gotSlot[slot] += k
				gotPool[poolOf[slot]] += k
			}
		})
	}
	// Within a pool the faster of two shards is taken, so one case may
	// favour a shard that was quicker then; over all of them each shard
	// takes a fair part of its pool's.
	for slot, pool := range poolOf {
		if float64(gotSlot[slot]) < 0.25*float64(gotPool[pool]) {
			t.Errorf("slot %d got %d of its pool's %d: the pool's shards share its weight", slot, gotSlot[slot], gotPool[pool])
		}
	}
	if w := p.Weights(); w["green"] != 100 {
		t.Errorf("Weights() = %v", w)
	}
}

func TestWeightsOf(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	done := registryapi.Cutover{Name: "a", Weights: map[string]int{"green": 100, "blue": 0}, UpdatedAt: at(1)}
	newer := registryapi.Cutover{Name: "b", Weights: map[string]int{"green": 90, "purple": 10}, UpdatedAt: at(2)}
	if w := route.WeightsOf(nil); w != nil {
		t.Errorf("no cutover: %v", w)
	}
	if w := route.WeightsOf([]registryapi.Cutover{newer, done}); w["purple"] != 10 {
		t.Errorf("the latest record's weights: %v", w)
	}
}
