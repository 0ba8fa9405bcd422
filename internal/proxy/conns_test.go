package proxy

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// A shard that allows 8 calls per connection, 30 long polls held open
// through the proxy: with connections sized from what the shard
// advertises a new instance starts at once; with one connection it waits
// behind the polls, on the grpc front. The frame front's long polls leave
// a quarter of each connection's streams (here 2 of 8) to forwarded
// calls, so the create starts at once there too.
func TestConnectionsPerShard(t *testing.T) {
	for _, tc := range []struct {
		name    string
		conns   int
		want    int
		blocked bool
	}{
		{"sized from the shard's limit", 0, 5, false},
		{"one connection", 1, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case mostly waits on its long polls, on a shard of its
			// own whose queued polls are only its own.
			t.Parallel()
			shards := simtest.StartN(t, 1, sim.Config{Partitions: 1, MaxConcurrentStreams: 8})
			p := startProxy(t, Config{Shards: simtest.ShardConfigs(shards), MaxInflightPerShard: 40, ConnsPerShard: tc.conns})
			st := p.Shards()[0]
			if st.Connections != tc.want || (tc.conns == 0 && st.MaxStreams != 8) {
				t.Fatalf("connections %d, maxStreams %d; want %d and 8", st.Connections, st.MaxStreams, tc.want)
			}
			gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
			ctx := budget.Context(t, time.Minute)
			if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "c.bpmn", Content: load.Process("c", "none")}}}); err != nil {
				t.Fatal(err)
			}
			// hold is how long a poll waits for a job, long against a
			// create that goes through at once: a create blocked behind
			// the polls waits about that long.
			const polls = 30
			hold := budget.Capped(2*time.Second, 10*time.Second)
			pollCtx, endPolls := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer endPolls() // the polls end with the case, not after hold
			for range polls {
				wg.Go(func() {
					stream, err := gw.ActivateJobs(pollCtx, &pb.ActivateJobsRequest{Type: "nothing", Worker: "w", MaxJobsToActivate: 1, Timeout: 1000, RequestTimeout: hold.Milliseconds()})
					if err == nil {
						for _, err := stream.Recv(); err == nil; _, err = stream.Recv() {
						}
					}
				})
			}
			budget.Eventually(t, 10*time.Second, "the polls to reach the shard", func() bool {
				return simMetric(t, shards[0], "zeebe_long_polling_queued_current", `type="nothing"`) >= 6
			})
			start := time.Now()
			cctx, cancel := context.WithTimeout(ctx, budget.Of(2*hold))
			defer cancel()
			if _, err := gw.CreateProcessInstance(cctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "c", Version: -1}); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			t.Logf("%d connections: a create took %v beside %d long polls", st.Connections, took.Round(time.Millisecond), polls)
			want := tc.blocked && p.Config().Front == route.FrontGRPC
			if blocked := took > hold/2; blocked != want {
				t.Errorf("a create took %v beside the long polls (hold %v, %s front): blocked %v, want %v", took, hold, p.Config().Front, blocked, want)
			}
		})
	}
}
