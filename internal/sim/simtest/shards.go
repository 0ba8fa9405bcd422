package simtest

import (
	"fmt"
	"testing"

	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/sim"
)

// Ends are the oldest and the newest Zeebe the simulator plays: the
// versions the integration tests of signals, drain, admission and the
// proxy run against (their metric names and gRPC fields differ most).
func Ends() []sim.Version { return []sim.Version{sim.Versions[0], sim.Versions[len(sim.Versions)-1]} }

// EachEnd runs test as a subtest for each version of Ends, named by it.
func EachEnd(t *testing.T, test func(t *testing.T, v sim.Version)) {
	for _, v := range Ends() {
		t.Run(v.String(), func(t *testing.T) { test(t, v) })
	}
}

// StartN runs n simulators with one configuration.
func StartN(t testing.TB, n int, cfg sim.Config) []*sim.Sim {
	t.Helper()
	var out []*sim.Sim
	for range n {
		out = append(out, Start(t, cfg))
	}
	return out
}

// ShardConfigs names simulators as a proxy's shards: shard-1, shard-2…
// with slots 1, 2….
func ShardConfigs(shards []*sim.Sim) []proxyapi.ShardConfig {
	var out []proxyapi.ShardConfig
	for i, s := range shards {
		sc := proxyapi.ShardConfig{ID: fmt.Sprintf("shard-%d", i+1), Addr: s.Addr().String(), Slot: i + 1}
		if a := s.RESTAddr(); a != nil {
			sc.REST = "http://" + a.String()
		}
		out = append(out, sc)
	}
	return out
}
