package grpcfront

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/physicaltenant"
	"github.com/shardctl/shardctl/internal/proxy/pbkeys"
	"github.com/shardctl/shardctl/internal/proxy/route"
)

// Zeebe's default long-polling timeout, used when a worker sends 0.
const defaultLongPoll = 10 * time.Second

// streamBuffer bounds the jobs waiting for one worker's job stream.
const streamBuffer = 64

// handBackTimeout bounds the hand-back of one batch of jobs.
const handBackTimeout = 10 * time.Second

// HandBack returns activated jobs the proxy cannot deliver: FailJob with
// the job's own retries and no backoff makes a job activatable again at
// once without using a retry, which is how Zeebe's gateway gives jobs
// back. It runs detached from the client, which may be gone, and Close
// waits for it.
func (p *Server) HandBack(s *route.Shard, jobs []*pb.ActivatedJob, reason string) {
	if len(jobs) == 0 {
		return
	}
	p.Metrics().HandedBack.WithLabelValues(s.ID, reason).Add(float64(len(jobs)))
	p.Go(func() {
		// One deadline for the batch: a shard that never answers holds
		// it handBackTimeout, not that much a job (its jobs then time
		// out there, as any job of a gone worker).
		ctx, cancel := context.WithTimeout(p.Background(), handBackTimeout)
		defer cancel()
		// Without a token to give it asks without one: a shard that wants
		// one refuses, and its jobs time out there, as any gone worker's.
		ctx, err := s.Conn.Own(ctx)
		if err != nil {
			s.NoteError(err)
		}
		for _, j := range jobs {
			_, err := s.Conn.Client().FailJob(ctx, &pb.FailJobRequest{
				JobKey: j.GetKey(), Retries: j.GetRetries(), RetryBackOff: 0,
				ErrorMessage: "handed back by the shardctl proxy: " + reason,
			})
			if err != nil {
				s.NoteError(err)
				if ctx.Err() != nil {
					return
				}
			}
		}
	})
}

// ReturnJobs hands back jobs a front collected for a client that went
// away before it could deliver them (the REST front's long poll): each to
// the shard its key names, with the slot taken out again.
func (p *Server) ReturnJobs(jobs []*pb.ActivatedJob, reason string) {
	byShard := map[*route.Shard][]*pb.ActivatedJob{}
	for _, j := range jobs {
		s, _, err := p.ShardForKey(j.GetKey())
		if err != nil {
			continue // its shard left: it times out there, as any job of a gone shard
		}
		byShard[s] = append(byShard[s], j)
	}
	for s, js := range byShard {
		p.HandBack(s, unstamp(js), reason)
	}
}

// detached carries ctx's values (the client's authorization) but not its
// cancellation: it ends after d, or when until does (p.Background(): when Close
// cuts the proxy's work short; p.Stopping(): as soon as the proxy stops).
func (p *Server) detached(ctx context.Context, d time.Duration, until context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(until, cancel)
	return c, func() { stop(); cancel() }
}

// pollBudget is how long the proxy's own calls may take: they must end
// before the client's deadline (zero: none), with time left to answer.
func pollBudget(deadline time.Time, requested time.Duration) time.Duration {
	if deadline.IsZero() {
		return requested
	}
	left := time.Until(deadline)
	margin := min(max(left/10, 50*time.Millisecond), time.Second)
	return max(min(requested, left-margin), 0)
}

// ValidActivation is the gateway's own check of an activation.
func ValidActivation(req *pb.ActivateJobsRequest) error {
	if strings.TrimSpace(req.GetType()) == "" {
		return status.Error(codes.InvalidArgument, "Expected to activate jobs with a non-empty job type, but it was empty")
	}
	if req.GetMaxJobsToActivate() < 1 {
		return status.Errorf(codes.InvalidArgument, "Expected to activate jobs with maxJobsToActivate greater than zero, but it was %d", req.GetMaxJobsToActivate())
	}
	return nil
}

// PollWait is how long the shards may hold a poll: the long poll asked
// for (Zeebe's default for 0, none when negative) within the client's
// deadline; ≤ 0 for none.
func PollWait(req *pb.ActivateJobsRequest, deadline time.Time) time.Duration {
	if req.GetRequestTimeout() < 0 {
		return 0
	}
	wait := time.Duration(req.GetRequestTimeout()) * time.Millisecond
	if req.GetRequestTimeout() == 0 {
		wait = defaultLongPoll
	}
	return pollBudget(deadline, wait)
}

// jobShards are the shards that serve jobs of a physical tenant (as the
// client sent it), in slot order.
func (p *Server) jobShards(tenant string) ([]*route.Shard, error) {
	return p.servingWhere(tenant, (*route.Shard).ServesJobs)
}

// ActivateJobs: a non-blocking sweep over the shards (round-robin start)
// asking each for the jobs still wanted; with nothing found and long
// polling asked for, a long poll on every shard at once, where the first
// shard that returns jobs answers and the others are cancelled. A worker
// never gets more than it asked for; anything activated beyond that, late,
// or for a worker that went away is handed back.
func (sv *Server) ActivateJobs(req *pb.ActivateJobsRequest, stream pb.Gateway_ActivateJobsServer) error {
	start := time.Now()
	err := sv.activateJobs(req, stream)
	sv.observe("ActivateJobs", start, err)
	return err
}

func (sv *Server) activateJobs(req *pb.ActivateJobsRequest, stream pb.Gateway_ActivateJobsServer) error {
	p := sv
	if err := ValidActivation(req); err != nil {
		return err
	}
	ctx := stream.Context()
	shards, err := p.jobShards(physicaltenant.Sent(ctx))
	if err != nil {
		return err
	}
	if len(shards) == 0 {
		return ErrNoJobShard
	}
	deadline, _ := ctx.Deadline()
	wait := PollWait(req, deadline)
	// A lone shard's own long poll answers at once when it has jobs: a
	// sweep first would ask it twice for every poll.
	if len(shards) == 1 && wait > 0 {
		return sv.longPoll(ctx, shards, req, wait, stream, int(req.GetMaxJobsToActivate()))
	}
	first := int(p.rr.Add(1) % uint64(len(shards)))

	remaining := int(req.GetMaxJobsToActivate())
	exhausted := 0
	for i := range shards {
		if remaining == 0 {
			break
		}
		s := shards[(first+i)%len(shards)]
		up := proto.Clone(req).(*pb.ActivateJobsRequest)
		up.MaxJobsToActivate, up.RequestTimeout = int32(remaining), -1
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		if err := sv.relayJobs(ctx, s, up, stream, &remaining); err != nil {
			if status.Code(err) == codes.ResourceExhausted {
				exhausted++
			}
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			continue // one shard's trouble is not the worker's
		}
	}
	if remaining < int(req.GetMaxJobsToActivate()) || req.GetRequestTimeout() < 0 {
		if remaining == int(req.GetMaxJobsToActivate()) && exhausted > 0 {
			return ExhaustedShards(req)
		}
		return nil
	}
	if wait <= 0 {
		return nil
	}
	return sv.longPoll(ctx, shards, req, wait, stream, remaining)
}

var ErrNoJobShard = status.Error(codes.Unavailable, "Expected a shard that is UP or DRAINING to activate jobs on, but there is none")

// ExhaustedShards is the answer to a poll that found no job while a shard
// answered RESOURCE_EXHAUSTED: the worker should back off.
func ExhaustedShards(req *pb.ActivateJobsRequest) error {
	return status.Errorf(codes.ResourceExhausted, "Expected to activate jobs of type '%s', but no jobs available and at least one shard returned 'RESOURCE_EXHAUSTED'. Please try again later.", req.GetType())
}

// SweepTimeout bounds one shard's non-blocking activation.
const SweepTimeout = 10 * time.Second

// relayJobs runs one shard's activation to its end and passes its batches
// on, within the remaining count. The call to the shard is detached from
// the worker's: if the worker goes away meanwhile, the jobs the shard
// already activated are still read, and handed back, rather than lost in
// a cancelled stream until their timeout.
func (sv *Server) relayJobs(ctx context.Context, s *route.Shard, req *pb.ActivateJobsRequest, stream pb.Gateway_ActivateJobsServer, remaining *int) error {
	p := sv
	upCtx, cancel := p.detached(ctx, SweepTimeout, p.Background())
	defer cancel()
	up, err := call(upCtx, p, s, "ActivateJobs", func(ctx context.Context, c pb.GatewayClient) (pb.Gateway_ActivateJobsClient, error) {
		return c.ActivateJobs(ctx, req)
	})
	if err != nil {
		return err
	}
	failed := false
	for {
		resp, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			s.NoteError(err)
			return err
		}
		jobs := resp.GetJobs()
		if failed {
			p.HandBack(s, jobs, "worker gone")
			continue
		}
		failed = !p.deliver(s, jobs, remaining, stream)
	}
}

// deliver passes a shard's batch on to the worker within the remaining
// count: the surplus is handed back, the rest sent with the shard's slot
// in its keys, and handed back too if the worker's stream fails. It
// reports whether the worker's stream still works.
func (p *Server) deliver(s *route.Shard, jobs []*pb.ActivatedJob, remaining *int, stream pb.Gateway_ActivateJobsServer) bool {
	if len(jobs) > *remaining {
		p.HandBack(s, jobs[*remaining:], "surplus")
		jobs = jobs[:*remaining]
	}
	if len(jobs) == 0 {
		return true
	}
	for _, j := range jobs {
		pbkeys.Stamp(j.ProtoReflect(), s.Slot)
	}
	if err := stream.Send(&pb.ActivateJobsResponse{Jobs: jobs}); err != nil {
		p.HandBack(s, unstamp(jobs), "worker gone")
		return false
	}
	*remaining -= len(jobs)
	return true
}

// unstamp takes the slot back out of jobs about to be handed back.
func unstamp(jobs []*pb.ActivatedJob) []*pb.ActivatedJob {
	out := make([]*pb.ActivatedJob, len(jobs))
	for i, j := range jobs {
		c := proto.Clone(j).(*pb.ActivatedJob)
		_, c.Key = keyslot.Split(c.GetKey())
		out[i] = c
	}
	return out
}

// longPoll asks every shard at once; the first shard to return jobs
// answers. The others are not cancelled: a shard may already have sent
// jobs that a cancelled stream would lose until their timeout. They run
// out their poll in the background and hand back whatever they get; a
// proxy that stops ends them, rather than wait out a poll.
func (sv *Server) longPoll(ctx context.Context, shards []*route.Shard, req *pb.ActivateJobsRequest, wait time.Duration, stream pb.Gateway_ActivateJobsServer, want int) error {
	p := sv
	var mu sync.Mutex // guards the fields below, never held across a send
	closed, winner := false, -1
	exhausted := 0 // polls the shard refused with RESOURCE_EXHAUSTED
	winnerDone := make(chan struct{})
	// The winner's goroutine alone sends to the worker, and counts what
	// it may still send; the handler returns only once no send is under
	// way (grpc-go forbids one after it). A worker that reads nothing
	// then blocks only the winner: the others hand back at once.
	remaining := want
	var sending sync.WaitGroup

	deliver := func(i int, s *route.Shard, jobs []*pb.ActivatedJob) {
		mu.Lock()
		if closed || (winner >= 0 && winner != i) {
			mu.Unlock()
			p.HandBack(s, jobs, "lost the long poll")
			return
		}
		winner = i
		sending.Add(1)
		mu.Unlock()
		defer sending.Done()
		if !p.deliver(s, jobs, &remaining, stream) {
			mu.Lock()
			closed = true
			mu.Unlock()
		}
	}

	// The call stays a long call until the last shard's poll ends, not
	// only until it answers: ending it cancels those polls, which only a
	// stopping proxy may do.
	long, done := p.LongCalls().Add(p.Stopping())
	var wg sync.WaitGroup // the polls this call waits for; Close waits for the rest
	for i, s := range shards {
		wg.Add(1)
		p.Go(func() {
			defer wg.Done()
			defer func() {
				mu.Lock()
				if winner == i {
					close(winnerDone)
				}
				mu.Unlock()
			}()
			// The shard's own long poll ends first; the margin only bounds
			// a shard that does not answer.
			upCtx, cancel := p.detached(ctx, wait+time.Second, long)
			defer cancel()
			up := proto.Clone(req).(*pb.ActivateJobsRequest)
			up.MaxJobsToActivate, up.RequestTimeout = int32(want), wait.Milliseconds()
			upstream, err := call(upCtx, p, s, "ActivateJobs", func(ctx context.Context, c pb.GatewayClient) (pb.Gateway_ActivateJobsClient, error) {
				return c.ActivateJobs(ctx, up)
			})
			if err != nil {
				return
			}
			for {
				resp, err := upstream.Recv()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						s.NoteError(err)
					}
					if status.Code(err) == codes.ResourceExhausted {
						mu.Lock()
						exhausted++
						mu.Unlock()
					}
					return
				}
				if jobs := resp.GetJobs(); len(jobs) > 0 {
					deliver(i, s, jobs)
				}
			}
		})
	}
	allDone := make(chan struct{})
	p.Go(func() { wg.Wait(); close(allDone); done() })
	var err error
	select {
	case <-winnerDone:
	case <-allDone:
	case <-ctx.Done():
		err = status.FromContextError(ctx.Err()).Err()
	case <-long.Done():
		// The proxy is stopping: answer now (no jobs is a normal answer,
		// the worker polls again, elsewhere); what the shards still send
		// is handed back.
	}
	mu.Lock()
	closed = true
	// Every shard refused: the worker backs off, as a Zeebe gateway
	// tells it, rather than poll again at once.
	if err == nil && winner < 0 && exhausted == len(shards) {
		err = ExhaustedShards(req)
	}
	mu.Unlock()
	sending.Wait()
	return err
}

// StreamActivatedJobs merges one upstream job stream per shard into the
// worker's stream through a bounded buffer. A job that finds the buffer
// full, and every job still buffered when the worker's stream ends, is
// handed back. A worker that reads nothing for StreamStallTimeout (its
// flow-control window full) gets its stream ended with
// RESOURCE_EXHAUSTED and its waiting jobs handed back, rather than hold
// them until their timeout.
func (sv *Server) StreamActivatedJobs(req *pb.StreamActivatedJobsRequest, stream pb.Gateway_StreamActivatedJobsServer) error {
	start := time.Now()
	err := sv.streamJobs(req, stream)
	sv.observe("StreamActivatedJobs", start, err)
	return err
}

type pushed struct {
	s   *route.Shard
	job *pb.ActivatedJob
}

func (sv *Server) streamJobs(req *pb.StreamActivatedJobsRequest, stream pb.Gateway_StreamActivatedJobsServer) error {
	p := sv
	if strings.TrimSpace(req.GetType()) == "" {
		return status.Error(codes.InvalidArgument, "Expected to stream activated jobs with a non-empty job type, but it was empty")
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	long, done := p.LongCalls().Add(p.Stopping())
	defer done()
	shards, err := p.jobShards(physicaltenant.Sent(ctx))
	if err != nil {
		return err
	}
	buffer := make(chan pushed, streamBuffer)
	var wg sync.WaitGroup
	for _, s := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sv.followShard(ctx, s, req, buffer)
		}()
	}

	// The sender takes a job only once its last Send returned: a worker
	// that stops reading stops it there, and the loop below sees how
	// long. It outlives this call when a Send is stuck (ending the call
	// ends the Send), so the proxy owns it.
	sendq, sendErr := make(chan pushed), make(chan error, 1)
	p.Go(func() {
		for it := range sendq {
			j := proto.Clone(it.job).(*pb.ActivatedJob)
			pbkeys.Stamp(j.ProtoReflect(), it.s.Slot)
			if err := stream.Send(j); err != nil {
				p.HandBack(it.s, []*pb.ActivatedJob{it.job}, "worker gone")
				sendErr <- err
				for it := range sendq {
					p.HandBack(it.s, []*pb.ActivatedJob{it.job}, "worker gone")
				}
				return
			}
		}
	})
	finish := func(reason string, pending []pushed) {
		close(sendq)
		cancel()
		wg.Wait()
		for _, it := range pending {
			p.HandBack(it.s, []*pb.ActivatedJob{it.job}, reason)
		}
		for {
			select {
			case it := <-buffer:
				p.HandBack(it.s, []*pb.ActivatedJob{it.job}, reason)
			default:
				return
			}
		}
	}
	// One job at a time goes from the buffer to the sender: while one
	// waits (out set), the buffer is not read and the stall timer runs.
	var next pushed
	in, out := buffer, chan pushed(nil)
	var stalled <-chan time.Time
	stall := time.NewTimer(time.Hour)
	defer stall.Stop()
	held := func() []pushed {
		if out == nil {
			return nil
		}
		return []pushed{next}
	}
	for {
		select {
		case next = <-in:
			in, out = nil, sendq
			stall.Reset(p.cfg.StreamStallTimeout)
			stalled = stall.C
		case out <- next:
			in, out, stalled = buffer, nil, nil
			stall.Stop()
		case <-stalled:
			n := len(buffer) + 1
			finish("worker stalled", held())
			p.Metrics().StreamsStalled.Inc()
			return status.Errorf(codes.ResourceExhausted, "Expected the worker to read its job stream, but it read nothing for %v: its %d waiting jobs were handed back for other workers. Please reopen the stream.", p.cfg.StreamStallTimeout, n)
		case err := <-sendErr:
			finish("worker gone", held())
			return err
		case <-ctx.Done():
			finish("worker gone", held())
			return status.FromContextError(stream.Context().Err()).Err()
		case <-long.Done():
			finish("worker gone", held())
			return status.Error(codes.Unavailable, "the proxy is shutting down: reconnect to another replica")
		}
	}
}

// followShard keeps one upstream job stream open while the worker's is,
// reopening it after a failure.
func (sv *Server) followShard(ctx context.Context, s *route.Shard, req *pb.StreamActivatedJobsRequest, buffer chan<- pushed) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if sv.relayStream(ctx, s, req, buffer) {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
			backoff = min(backoff*2, 5*time.Second)
		}
	}
}

// How a job stream ends upstream: the shard has already sent jobs that
// are still in the connection's buffers, and cancelling the call at once
// would lose them until their timeout. So the proxy goes on reading, and
// handing back, until nothing came for streamDrainIdle (at most
// streamDrainMax), and only then cancels.
const (
	streamDrainIdle = 200 * time.Millisecond
	streamDrainMax  = 2 * time.Second
)

// relayStream runs one upstream job stream until it fails or the
// worker's ends (then drained), and reports whether any job came.
func (sv *Server) relayStream(ctx context.Context, s *route.Shard, req *pb.StreamActivatedJobsRequest, buffer chan<- pushed) (got bool) {
	p := sv
	upCtx, cancelUp := context.WithCancel(context.WithoutCancel(outgoing(ctx)))
	defer cancelUp()
	idle, limit := time.AfterFunc(time.Hour, cancelUp), time.AfterFunc(time.Hour, cancelUp)
	idle.Stop()
	limit.Stop()
	defer idle.Stop()
	defer limit.Stop()
	stopWatch := context.AfterFunc(ctx, func() {
		idle.Reset(streamDrainIdle)
		limit.Reset(streamDrainMax)
	})
	defer stopWatch()
	up, err := s.Conn.Client().StreamActivatedJobs(upCtx, req)
	if err != nil {
		return false
	}
	// Handed back only once the upstream call is over: handed back
	// earlier, the shard would push them into this same call again.
	var drained []*pb.ActivatedJob
	defer func() { p.HandBack(s, drained, "worker gone") }()
	full := false
	for {
		j, err := up.Recv()
		if err != nil {
			return got
		}
		got = true
		if ctx.Err() != nil {
			drained = append(drained, j)
			idle.Reset(streamDrainIdle)
			continue
		}
		if full {
			// The buffer was full a moment ago: wait for room rather than
			// bounce every job back and forth between shard and proxy
			// while the worker is slow.
			select {
			case buffer <- pushed{s, j}:
				full = false
			case <-ctx.Done():
				p.HandBack(s, []*pb.ActivatedJob{j}, "worker gone")
			}
			continue
		}
		select {
		case buffer <- pushed{s, j}:
		default:
			p.HandBack(s, []*pb.ActivatedJob{j}, "stream buffer full")
			full = true
		}
	}
}
