package route

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

func TestWantFollowsTheShardSet(t *testing.T) {
	sims := simtest.StartN(t, 3, sim.Config{})
	var mu sync.Mutex
	var lastErr error
	syncs := 0
	p := startCore(t, Config{Dynamic: true, OnSync: func(err error) {
		mu.Lock()
		lastErr, syncs = err, syncs+1
		mu.Unlock()
	}})
	state := func(id string) proxyapi.State {
		if s := p.ShardByID(id); s != nil {
			return s.State()
		}
		return ""
	}
	cfgs := simtest.ShardConfigs(sims)
	p.Want(cfgs)
	budget.Eventually(t, 5*time.Second, "three shards", func() bool { return len(p.Shards()) == 3 })

	for _, tc := range []struct {
		name   string
		want   func() []proxyapi.ShardConfig
		check  func() bool
		expect string
	}{
		{"drain one", func() []proxyapi.ShardConfig {
			c := append([]proxyapi.ShardConfig(nil), cfgs...)
			c[1].State = proxyapi.Draining
			return c
		}, func() bool { return state("shard-2") == proxyapi.Draining && state("shard-1") == proxyapi.Up }, "shard-2 DRAINING"},
		{"one leaves the registry", func() []proxyapi.ShardConfig { return []proxyapi.ShardConfig{cfgs[0], cfgs[1]} },
			func() bool {
				return state("shard-3") == proxyapi.Down && state("shard-2") == proxyapi.Up && len(p.Shards()) == 3
			}, "shard-3 kept as DOWN, shard-2 UP again"},
		{"it comes back", func() []proxyapi.ShardConfig { return cfgs },
			func() bool { return state("shard-3") == proxyapi.Up }, "shard-3 UP"},
		{"a new address replaces the shard", func() []proxyapi.ShardConfig {
			c := append([]proxyapi.ShardConfig(nil), cfgs...)
			c[2].Addr = sims[0].Addr().String()
			return c
		}, func() bool { s := p.ShardByID("shard-3"); return s != nil && s.Addr == sims[0].Addr().String() }, "shard-3 at its new address"},
		{"one leaves", func() []proxyapi.ShardConfig { return cfgs[:2] },
			func() bool { return state("shard-3") == proxyapi.Down }, "shard-3 kept as DOWN"},
		// The registry gave its slot to another shard: it released it.
		{"another shard takes its slot", func() []proxyapi.ShardConfig {
			return append(cfgs[:2:2], proxyapi.ShardConfig{ID: "shard-3b", Addr: sims[2].Addr().String(), Slot: cfgs[2].Slot})
		}, func() bool { return state("shard-3b") == proxyapi.Up && state("shard-3") == "" && len(p.Shards()) == 3 }, "shard-3b in slot 3, shard-3 gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.Want(tc.want())
			budget.Eventually(t, 2*time.Second, tc.expect, tc.check)
		})
	}

	// A shard that cannot be reached does not hold back the others'
	// states, and is tried again until it can join.
	unreachable := proxyapi.ShardConfig{ID: "shard-9", Addr: "127.0.0.1:1", Slot: 9}
	c := append([]proxyapi.ShardConfig(nil), cfgs...)
	c[0].State = proxyapi.OutOfService
	p.Want(append(c, unreachable))
	budget.Eventually(t, 2*time.Second, "shard-1 OUT_OF_SERVICE while shard-9 cannot be reached", func() bool {
		return state("shard-1") == proxyapi.OutOfService
	})
	budget.Eventually(t, 30*time.Second, "a sync error naming shard-9", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lastErr != nil && strings.Contains(lastErr.Error(), "shard-9")
	})
	if state("shard-9") != "" {
		t.Errorf("an unreachable shard joined")
	}
}
