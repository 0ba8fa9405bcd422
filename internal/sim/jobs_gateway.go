package sim

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
)

// streamBuffer is how many pushed jobs a job stream holds for a worker
// that is slower than the engine; past it, jobs stay queued for polling.
const streamBuffer = 32

func validateJobRequest(rpc, typ string, timeout int64, tenants []string) error {
	if strings.TrimSpace(typ) == "" {
		return invalid("Expected to %s with a non-empty job type, but it was empty", rpc)
	}
	if timeout < 0 {
		return invalid("Expected to %s with a timeout of zero or more, but it was %d", rpc, timeout)
	}
	for _, t := range tenants {
		if err := checkTenant(rpc, t); err != nil {
			return err
		}
	}
	return nil
}

// ActivateJobs follows Zeebe's gateway: visit the partitions round-robin
// for the jobs still wanted, send each non-empty batch; with nothing found
// and long polling asked for, wait until jobs of the type appear or the
// request timeout ends.
func (g *gateway) ActivateJobs(req *pb.ActivateJobsRequest, stream pb.Gateway_ActivateJobsServer) error {
	if err := validateJobRequest("activate jobs", req.GetType(), req.GetTimeout(), req.GetTenantIds()); err != nil {
		return err
	}
	if req.GetMaxJobsToActivate() < 1 {
		return invalid("Expected to activate jobs with maxJobsToActivate greater than zero, but it was %d", req.GetMaxJobsToActivate())
	}
	ctx := stream.Context()
	longPoll := req.GetRequestTimeout() >= 0
	wait := millis(req.GetRequestTimeout())
	if req.GetRequestTimeout() == 0 {
		wait = defaultLongPollTimeout
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()

	remaining := int(req.GetMaxJobsToActivate())
	for {
		var notify chan struct{}
		if longPoll {
			// Registered before the sweep, so a job created during it
			// still wakes this request.
			notify = g.c.pollers.register(req.GetType())
		}
		sent, exhausted, err := g.sweep(ctx, req, &remaining, stream)
		// A long poll that found a partition exhausted and no job is
		// answered at once, as Zeebe's long-polling handler does, not
		// parked: the worker backs off.
		if err != nil || sent > 0 || !longPoll || exhausted {
			if notify != nil {
				g.c.pollers.unregister(req.GetType(), notify)
			}
			g.c.metrics.activatedPerPoll.Observe(float64(sent))
			if err == nil && sent == 0 && exhausted {
				return status.Error(codes.ResourceExhausted, "Expected to activate jobs of type '"+req.GetType()+"', but no jobs available and at least one broker returned 'RESOURCE_EXHAUSTED'. Please try again later.")
			}
			return err
		}
		select {
		case <-notify:
			g.c.pollers.unregister(req.GetType(), notify)
		case <-timer.C:
			g.c.pollers.unregister(req.GetType(), notify)
			g.c.metrics.activatedPerPoll.Observe(0)
			return nil
		case <-ctx.Done():
			g.c.pollers.unregister(req.GetType(), notify)
			return status.FromContextError(ctx.Err()).Err()
		case <-g.c.closing:
			g.c.pollers.unregister(req.GetType(), notify)
			return nil
		}
	}
}

// sweep asks each partition once for the jobs still wanted.
func (g *gateway) sweep(ctx context.Context, req *pb.ActivateJobsRequest, remaining *int, stream pb.Gateway_ActivateJobsServer) (sent int, exhausted bool, err error) {
	n := len(g.c.partitions)
	first := int(g.c.rr.Add(1))
	timeout := millis(req.GetTimeout())
	for i := 0; i < n && *remaining > 0; i++ {
		p := g.c.partitions[(first+i)%n]
		want := *remaining
		done := make(chan []*pb.ActivatedJob, 1)
		if err := p.enqueue(classClient, func() {
			done <- p.activateJobs(req.GetType(), want, req.GetWorker(), timeout, req.GetFetchVariable())
		}); err != nil {
			exhausted = true
			continue
		}
		var jobs []*pb.ActivatedJob
		select {
		case jobs = <-done:
		case <-ctx.Done():
			// The partition still activates; hand those jobs back,
			// unless it stops first and never runs the command.
			g.c.detached.Go(func() {
				select {
				case jobs := <-done:
					g.giveBack(jobs)
				case <-g.c.stop:
				}
			})
			return sent, exhausted, status.FromContextError(ctx.Err()).Err()
		}
		for len(jobs) > 0 {
			batch := nextBatch(jobs)
			if err := stream.Send(&pb.ActivateJobsResponse{Jobs: batch}); err != nil {
				g.giveBack(jobs)
				return sent, exhausted, err
			}
			jobs = jobs[len(batch):]
			sent += len(batch)
			*remaining -= len(batch)
		}
	}
	return sent, exhausted, nil
}

// maxResponseBytes keeps each response under the 4 MiB a gRPC client
// accepts by default; Zeebe likewise caps a job batch by message size.
const maxResponseBytes = 2 << 20

// nextBatch is the longest prefix of jobs that fits one response (at least
// one job, however large).
func nextBatch(jobs []*pb.ActivatedJob) []*pb.ActivatedJob {
	size := 0
	for i, j := range jobs {
		size += len(j.GetVariables()) + len(j.GetCustomHeaders()) + 256
		if size > maxResponseBytes && i > 0 {
			return jobs[:i]
		}
	}
	return jobs
}

// giveBack makes undelivered jobs activatable again at once.
func (g *gateway) giveBack(jobs []*pb.ActivatedJob) {
	for _, j := range jobs {
		p := g.c.partitionFor(PartitionOfKey(j.GetKey()))
		if p == nil {
			continue
		}
		key := j.GetKey()
		_ = p.enqueue(classInternal, func() { p.giveBack(key) })
	}
}

// StreamActivatedJobs registers a job stream: jobs that become activatable
// from now on are pushed to it (Zeebe 8.5's job push). Jobs it cannot take
// stay queued for polling; jobs in its buffer when it closes are given
// back.
func (g *gateway) StreamActivatedJobs(req *pb.StreamActivatedJobsRequest, stream pb.Gateway_StreamActivatedJobsServer) error {
	if err := validateJobRequest("stream activated jobs", req.GetType(), req.GetTimeout(), req.GetTenantIds()); err != nil {
		return err
	}
	s := &jobStream{
		worker:  req.GetWorker(),
		timeout: millis(req.GetTimeout()),
		fetch:   req.GetFetchVariable(),
		jobs:    make(chan *pb.ActivatedJob, streamBuffer),
	}
	g.c.streams.add(req.GetType(), s)
	defer func() {
		g.c.streams.remove(req.GetType(), s)
		for {
			select {
			case j := <-s.jobs:
				g.giveBack([]*pb.ActivatedJob{j})
			default:
				return
			}
		}
	}()
	ctx := stream.Context()
	for {
		select {
		case j := <-s.jobs:
			if err := stream.Send(j); err != nil {
				g.giveBack([]*pb.ActivatedJob{j})
				return err
			}
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-g.c.closing:
			return errShuttingDown()
		}
	}
}
