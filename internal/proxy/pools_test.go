package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/probes/load"
)

// Pool weights place new instances between pools by weight, and over
// the shards of a pool by power-of-two-choices; a pool of weight 0, or not
// named, gets none; without weights every shard takes its share.
func TestPoolWeights(t *testing.T) {
	shards := startShards(t, 4, sim.Config{Partitions: 1})
	cfgs := shardConfigs(shards)
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
			slot, _ := splitKey(resp.GetProcessInstanceKey())
			pools[poolOf[slot]]++
			slots[slot]++
		}
		return pools, slots
	}
	const n = 600
	for _, tc := range []struct {
		weights map[string]int
		green   float64 // expected share, ±5 points
	}{
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
			if share < tc.green-0.05 || share > tc.green+0.05 {
				t.Errorf("green got %.0f%% of %d new instances, want %.0f%% ± 5 (%v)", share*100, n, tc.green*100, pools)
			}
			for slot, pool := range poolOf {
				if want := float64(n) * map[string]float64{"green": tc.green, "blue": 1 - tc.green}[pool] / 2; want > 50 && float64(slots[slot]) < want/2 {
					t.Errorf("slot %d got %d, want about %.0f: the pool's shards share its weight", slot, slots[slot], want)
				}
			}
		})
	}
	if w := p.Weights(); w["green"] != 100 {
		t.Errorf("Weights() = %v", w)
	}
}

func TestWeightsOf(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(int64(s), 0) }
	done := registry.Cutover{Name: "a", Weights: map[string]int{"green": 100, "blue": 0}, UpdatedAt: at(1)}
	newer := registry.Cutover{Name: "b", Weights: map[string]int{"green": 90, "purple": 10}, UpdatedAt: at(2)}
	if w := WeightsOf(nil); w != nil {
		t.Errorf("no cutover: %v", w)
	}
	if w := WeightsOf([]registry.Cutover{newer, done}); w["purple"] != 10 {
		t.Errorf("the latest record's weights: %v", w)
	}
}
