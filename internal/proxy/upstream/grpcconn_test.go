package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// The proxy's own calls on the frame front's connections: answers,
// statuses and ends as the Zeebe gateway API gives them through grpc-go.
func TestShardConn(t *testing.T) {
	shard := simtest.Start(t, sim.Config{Partitions: 2})
	u := NewPool(shard.Addr().String(), nil, 1)
	t.Cleanup(u.Close)
	gw := pb.NewGatewayClient(&grpcConn{u: u, id: "s1", authority: shard.Addr().String()})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	down := NewPool(gone, nil, 1)
	t.Cleanup(down.Close)
	dead := pb.NewGatewayClient(&grpcConn{u: down, id: "s2", authority: gone})

	ctx := budget.Context(t, time.Minute)
	if _, err := gw.DeployResource(ctx, &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "sc.bpmn", Content: load.Process("sc", "sc-task")}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.CreateProcessInstance(ctx, &pb.CreateProcessInstanceRequest{BpmnProcessId: "sc", Version: -1}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		run      func(ctx context.Context) (int, error)
		want     codes.Code
		wantMsg  string
		wantJobs int
	}{
		{"a unary call", func(ctx context.Context) (int, error) {
			topo, err := gw.Topology(ctx, &pb.TopologyRequest{})
			return int(topo.GetPartitionsCount()), err
		}, codes.OK, "", 2},
		{"a stream with a job", func(ctx context.Context) (int, error) {
			return simtest.CountJobs(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "sc-task", Worker: "w", MaxJobsToActivate: 5, Timeout: 60000, RequestTimeout: -1}))
		}, codes.OK, "", 1},
		{"a stream with none", func(ctx context.Context) (int, error) {
			return simtest.CountJobs(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "none", Worker: "w", MaxJobsToActivate: 5, Timeout: 60000, RequestTimeout: -1}))
		}, codes.OK, "", 0},
		{"the shard's refusal", func(ctx context.Context) (int, error) {
			return simtest.CountJobs(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "", Worker: "w", MaxJobsToActivate: 5}))
		}, codes.InvalidArgument, "non-empty job type", 0},
		{"a unary call the shard refuses", func(ctx context.Context) (int, error) {
			_, err := gw.CompleteJob(ctx, &pb.CompleteJobRequest{JobKey: 1<<51 | 12345}) // partition 1, no such job
			return 0, err
		}, codes.NotFound, "", 0},
		{"a deadline before the long poll ends", func(ctx context.Context) (int, error) {
			ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			return simtest.CountJobs(gw.ActivateJobs(ctx, &pb.ActivateJobsRequest{Type: "none", Worker: "w", MaxJobsToActivate: 5, Timeout: 60000, RequestTimeout: 30000}))
		}, codes.DeadlineExceeded, "", 0},
		{"a shard that is not there", func(ctx context.Context) (int, error) {
			_, err := dead.Topology(ctx, &pb.TopologyRequest{})
			return 0, err
		}, codes.Unavailable, "connection error", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := tc.run(ctx)
			if st := status.Convert(err); st.Code() != tc.want || !strings.Contains(st.Message(), tc.wantMsg) {
				t.Fatalf("got %v, want %v with %q", err, tc.want, tc.wantMsg)
			}
			if n != tc.wantJobs {
				t.Errorf("got %d, want %d", n, tc.wantJobs)
			}
		})
	}
	// Every call's stream ended, the abandoned long poll's too.
	budget.Eventually(t, 5*time.Second, "the streams to end", func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, c := range u.conns {
			if c.Streams() > 0 {
				return false
			}
		}
		return true
	})
}

// A shard whose connections fail is not dialled once per call: calls
// fail fast with the last dial's error until the backoff ends, then one
// dial tries again.
func TestDialBackoff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepts atomic.Int32
	acceptDone := make(chan struct{})
	defer func() { ln.Close(); <-acceptDone }()
	go func() {
		defer close(acceptDone)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			nc.Close() // the TLS handshake fails: a failed dial
		}
	}()
	u := NewPool(ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}, 1)
	defer u.Close()
	for i := range 5 {
		_, err := u.conn()
		var de *errDial
		if !errors.As(err, &de) {
			t.Fatalf("call %d: %v, want a dial error", i, err)
		}
	}
	if n := accepts.Load(); n != 1 {
		t.Errorf("5 calls in a row dialled %d times, want 1 until the backoff ends", n)
	}
	time.Sleep(dialBackoffBase * 3 / 2) // past the first backoff and its jitter
	if _, err := u.conn(); err == nil {
		t.Fatal("a dial to a peer that closes every connection succeeded")
	}
	budget.Eventually(t, 5*time.Second, "the second dial", func() bool { return accepts.Load() == 2 })
}
