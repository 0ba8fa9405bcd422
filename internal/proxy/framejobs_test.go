package proxy

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// jobShard is a shard whose job polls the test scripts: the simulator
// never sends more jobs than asked, nor a batch larger than a window,
// and a test cannot hold its poll open at will. It records the jobs
// handed back to it (FailJob) and how many polls it held at once.
type jobShard struct {
	fakeGateway
	// batches answers a poll: the batches to send, in order. It may
	// block (a held poll); ctx ends with the poll.
	batches func(ctx context.Context, req *pb.ActivateJobsRequest) [][]*pb.ActivatedJob

	mu        sync.Mutex
	polls     int
	active    int
	maxActive int
	failed    []int64
}

func (j *jobShard) ActivateJobs(req *pb.ActivateJobsRequest, stream pb.Gateway_ActivateJobsServer) error {
	j.mu.Lock()
	j.polls++
	j.active++
	j.maxActive = max(j.maxActive, j.active)
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.active--
		j.mu.Unlock()
	}()
	for _, b := range j.batches(stream.Context(), req) {
		if err := stream.Send(&pb.ActivateJobsResponse{Jobs: b}); err != nil {
			return err
		}
	}
	return nil
}

func (j *jobShard) FailJob(_ context.Context, req *pb.FailJobRequest) (*pb.FailJobResponse, error) {
	j.mu.Lock()
	j.failed = append(j.failed, req.GetJobKey())
	j.mu.Unlock()
	return &pb.FailJobResponse{}, nil
}

// handedBack is the keys handed back so far, sorted.
func (j *jobShard) handedBack() []int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Sorted(slices.Values(j.failed))
}

func (j *jobShard) counts() (polls, maxActive int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.polls, j.maxActive
}

// startJobShard serves j (Topology: one partition) with the server
// options given, and a proxy in front of it alone, so polls are relayed.
func startJobShard(t *testing.T, j *jobShard, opts ...grpc.ServerOption) *Proxy {
	t.Helper()
	j.partitions = 1
	addr := serveGateway(t, j, opts...)
	return startProxy(t, Config{Shards: []proxyapi.ShardConfig{{ID: "jobs", Addr: addr, Slot: 3}}, ConnsPerShard: 1})
}

// fakeJobs are n jobs of the shard's, keyed from partition 1's counter
// first on, each with vars as its variables.
func fakeJobs(first, n int, vars string) []*pb.ActivatedJob {
	var out []*pb.ActivatedJob
	for i := range n {
		out = append(out, &pb.ActivatedJob{Key: 1<<51 | int64(first+i), Type: "t", Retries: 3, Variables: vars, ProcessInstanceKey: 1<<51 | 7})
	}
	return out
}

func rawKeys(jobs []*pb.ActivatedJob) []int64 {
	var out []int64
	for _, j := range jobs {
		out = append(out, j.GetKey())
	}
	return out
}

// A relayed poll hands the worker no more jobs than it asked for, with
// keys (its own and nested ones) carrying the shard's slot, and hands the
// rest back to the shard at once, whether the surplus came in the batch
// that filled the count or after it.
func TestRelayedPollSurplus(t *testing.T) {
	tests := []struct {
		name    string
		max     int32
		batches [][]*pb.ActivatedJob
		want    []int64 // the shard's keys the worker gets
		back    []int64 // and those handed back
	}{
		{"one batch past the count", 2, [][]*pb.ActivatedJob{fakeJobs(1, 5, "{}")},
			rawKeys(fakeJobs(1, 2, "")), rawKeys(fakeJobs(3, 3, ""))},
		{"a batch after the count", 2, [][]*pb.ActivatedJob{fakeJobs(1, 1, "{}"), fakeJobs(2, 3, "{}"), fakeJobs(5, 2, "{}")},
			rawKeys(fakeJobs(1, 2, "")), rawKeys(fakeJobs(3, 4, ""))},
		{"within the count", 4, [][]*pb.ActivatedJob{fakeJobs(1, 2, "{}"), fakeJobs(3, 2, "{}")},
			rawKeys(fakeJobs(1, 4, "")), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := &jobShard{batches: func(context.Context, *pb.ActivateJobsRequest) [][]*pb.ActivatedJob { return tt.batches }}
			p := startJobShard(t, j)
			gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
			ctx := budget.Context(t, 30*time.Second)
			jobs, err := simtest.ReadJobs(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "t", Worker: "w", MaxJobsToActivate: tt.max, Timeout: 60000, RequestTimeout: 1000}))
			if err != nil {
				t.Fatalf("the poll ended with %v", err)
			}
			var got []int64
			for _, job := range jobs {
				slot, raw := keyslot.Split(job.GetKey())
				if slot != 3 || job.GetProcessInstanceKey() != keyslot.With(1<<51|7, 3) {
					t.Errorf("job %d reached the worker with keys %d / %d: not stamped with slot 3", raw, job.GetKey(), job.GetProcessInstanceKey())
				}
				got = append(got, raw)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("the worker got jobs %v, want %v", got, tt.want)
			}
			budget.Eventually(t, 10*time.Second, "the surplus to be handed back", func() bool {
				return slices.Equal(j.handedBack(), tt.back)
			})
			if polls, _ := j.counts(); polls != 1 {
				t.Errorf("the shard got %d polls for one, want 1", polls)
			}
		})
	}
}

// A batch larger than every flow-control window on the way (the shard's
// to the proxy, the proxy's to the worker) arrives whole.
func TestRelayedPollLargeBatch(t *testing.T) {
	vars := `{"pad":"` + strings.Repeat("v", 300<<10) + `"}`
	j := &jobShard{batches: func(context.Context, *pb.ActivateJobsRequest) [][]*pb.ActivatedJob {
		return [][]*pb.ActivatedJob{fakeJobs(1, 2, vars), fakeJobs(3, 1, vars)}
	}}
	p := startJobShard(t, j)
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	ctx := budget.Context(t, 30*time.Second)
	jobs, err := simtest.ReadJobs(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "t", Worker: "w", MaxJobsToActivate: 3, Timeout: 60000}))
	if err != nil || len(jobs) != 3 {
		t.Fatalf("the poll got %d jobs, %v; want 3", len(jobs), err)
	}
	for _, job := range jobs {
		if job.GetVariables() != vars {
			t.Errorf("job %d came with %d bytes of variables, want %d", job.GetKey(), len(job.GetVariables()), len(vars))
		}
	}
	if back := j.handedBack(); len(back) != 0 {
		t.Errorf("jobs %v handed back from a poll the worker read whole", back)
	}
}

// A worker that goes away while its poll waits on the shard: the shard's
// poll runs on (it cannot be taken back without losing what it brings),
// and the jobs it brings are handed back.
func TestRelayedPollWorkerGone(t *testing.T) {
	release := make(chan struct{})
	j := &jobShard{batches: func(ctx context.Context, _ *pb.ActivateJobsRequest) [][]*pb.ActivatedJob {
		select {
		case <-release:
		case <-ctx.Done():
			return nil
		}
		return [][]*pb.ActivatedJob{fakeJobs(1, 2, "{}")}
	}}
	p := startJobShard(t, j)
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	ctx, cancel := context.WithCancel(budget.Context(t, 30*time.Second))
	stream, err := gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "t", Worker: "w", MaxJobsToActivate: 2, Timeout: 60000, RequestTimeout: 20000})
	if err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 10*time.Second, "the poll to reach the shard", func() bool { polls, _ := j.counts(); return polls == 1 })
	cancel()
	if _, err := stream.Recv(); err == nil {
		t.Fatal("a cancelled poll got a batch")
	}
	budget.Eventually(t, 10*time.Second, "the proxy to see the worker go", func() bool {
		return proxyMetric(t, p, "shardctl_proxy_requests_total", `rpc="ActivateJobs"`, `code="Canceled"`) == 1
	})
	close(release)
	budget.Eventually(t, 10*time.Second, "the jobs the worker left to be handed back", func() bool {
		return slices.Equal(j.handedBack(), rawKeys(fakeJobs(1, 2, "")))
	})
}

// A worker whose window never opens: the batch written to it waits in
// the proxy; when the worker resets its stream, the batch it never got
// is handed back, not lost until the job timeout.
func TestRelayedPollUnreadBatchHandedBack(t *testing.T) {
	j := &jobShard{batches: func(context.Context, *pb.ActivateJobsRequest) [][]*pb.ActivatedJob {
		return [][]*pb.ActivatedJob{fakeJobs(1, 2, "{}")}
	}}
	p := startJobShard(t, j)
	if p.Config().Front != route.FrontFrames {
		t.Skip("grpc-go's server does not say what a stream has not sent: its front cannot hand such a batch back")
	}
	nc, err := net.Dial("tcp", p.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(budget.Of(20 * time.Second)))
	fr := http2.NewFramer(nc, nc)
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	block, body := rawCall(t, "/gateway_protocol.Gateway/ActivateJobs", &pb.ActivateJobsRequest{Type: "t", Worker: "w", MaxJobsToActivate: 2, Timeout: 60000, RequestTimeout: 5000})
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, body); err != nil {
		t.Fatal(err)
	}
	// The response head comes with the first batch; its data cannot.
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the proxy's frames: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
			continue
		case *http2.DataFrame:
			t.Fatalf("%d bytes of data came through a closed window", len(f.Data()))
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				t.Fatal("the poll ended before its batch came")
			}
		default:
			continue
		}
		break
	}
	if len(j.handedBack()) != 0 {
		t.Fatalf("jobs %v handed back while the worker may still read them", j.handedBack())
	}
	if err := fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 10*time.Second, "the unread batch to be handed back", func() bool {
		return slices.Equal(j.handedBack(), rawKeys(fakeJobs(1, 2, "")))
	})
}

// Polls are long and the shard limits its streams: relayed polls leave a
// quarter of a connection's streams to forwarded calls; the polls past
// that wait for room in the proxy's own handler, and every one is
// served.
func TestRelayedPollsLeaveRoom(t *testing.T) {
	const streams, polls = 8, 10
	release := make(chan struct{})
	var next sync.Mutex
	key := 0
	j := &jobShard{batches: func(ctx context.Context, _ *pb.ActivateJobsRequest) [][]*pb.ActivatedJob {
		select {
		case <-release:
		case <-ctx.Done():
			return nil
		}
		next.Lock()
		defer next.Unlock()
		key++
		return [][]*pb.ActivatedJob{fakeJobs(key, 1, "{}")}
	}}
	p := startJobShard(t, j, grpc.MaxConcurrentStreams(streams))
	if p.Config().Front != route.FrontFrames {
		t.Skip("the grpc front's calls to a shard share grpc-go's connections, which keep no room for forwarded calls")
	}
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	ctx := budget.Context(t, time.Minute)
	got := make(chan error, polls)
	for range polls {
		go func() {
			n, err := simtest.CountJobs(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "t", Worker: "w", MaxJobsToActivate: 1, Timeout: 60000, RequestTimeout: 30000}))
			if err == nil && n != 1 {
				err = fmt.Errorf("a poll got %d jobs, want 1", n)
			}
			got <- err
		}()
	}
	budget.Eventually(t, 10*time.Second, "the polls with room to reach the shard", func() bool { n, _ := j.counts(); return n == streams*3/4 })
	time.Sleep(budget.Of(200 * time.Millisecond)) // what would come past the limit, comes
	if _, most := j.counts(); most > streams*3/4 {
		t.Errorf("the shard held %d polls at once on %d streams: no quarter left for forwarded calls", most, streams)
	}
	// A forwarded call still has a stream (the fake shard does not
	// complete jobs: that it says so is that the call reached it).
	cctx, cancel := context.WithTimeout(ctx, budget.Of(5*time.Second))
	defer cancel()
	if _, err := gw.CompleteJob(cctx, &pb.CompleteJobRequest{JobKey: keyslot.With(1<<51|1, 3)}); status.Code(err) != codes.Unimplemented {
		t.Errorf("CompleteJob while polls fill the shard's streams: %v, want the shard's Unimplemented", err)
	}
	close(release)
	for range polls {
		if err := <-got; err != nil {
			t.Error(err)
		}
	}
}
