package framefront

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/h2"
	"github.com/shardctl/shardctl/internal/proxy/grpcfront"
	"github.com/shardctl/shardctl/internal/proxy/grpcwire"
	"github.com/shardctl/shardctl/internal/proxy/pbkeys"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/proxy/upstream"
)

const activateJobsPath = "/" + gatewayService + "/ActivateJobs"

var activateJobsResponse = (&pb.ActivateJobsResponse{}).ProtoReflect().Descriptor()

// jobCall is an ActivateJobs call on the frame front while one shard
// serves jobs: there is nothing to merge, so the shard's poll is relayed
// on frames, each batch with its keys stamped on the wire, and no
// goroutine runs for it. It keeps the local handler's promises: the
// worker gets no more than it asked for, and a job the worker did not
// get (gone, or its window never opened) is handed back. With more
// shards, or no room for a poll on the shard's connections, the call
// goes to the local handler instead.
type jobCall struct {
	f      *Front
	fc     *frontConn // the worker's connection
	cs     *h2.Stream // the worker's
	rh     requestHead
	fields []hpack.HeaderField
	start  time.Time
	// deadline of the worker's grpc-timeout (zero: none); timer answers
	// there.
	deadline time.Time
	timer    *time.Timer

	mu        sync.Mutex
	req       []byte // the request as received: prefix and message
	started   bool
	s         *route.Shard
	up        *h2.Stream
	act       *pb.ActivateJobsRequest
	remaining int  // jobs the worker may still get
	gone      bool // the worker will take nothing more: jobs that come are handed back
	buf       upstream.PacedMessages
	// sent are the batches written to the worker that may still wait
	// for its window, with owed, the shard's bytes they stand for: its
	// window is given back once the worker has them.
	sent    []sentBatch
	written int // bytes of DATA written to the worker so far
	owed    int
	waiting bool // a goroutine waits for the worker's window
	// upEnd: the shard's poll has ended; endLong unregisters it as a
	// long call.
	upEnd   bool
	reset   bool // the proxy reset the poll
	endLong func()

	// wmu orders what is written to the worker: the head once, batches,
	// then the status, nothing after it.
	wmu      sync.Mutex
	headSent bool
	answered bool
}

// sentBatch is one batch written to the worker: where it ends in the
// stream's data, and the shard's message, whose keys are the shard's.
type sentBatch struct {
	end int
	raw []byte
}

func (f *Front) newJobCall(fc *frontConn, s *h2.Stream, head *requestHead, fields []hpack.HeaderField) *jobCall {
	jc := &jobCall{f: f, fc: fc, cs: s, rh: *head, fields: slices.Clone(fields), start: time.Now()} // the connection reuses fields
	if head.hasTimeout {
		jc.deadline = jc.start.Add(head.timeout)
		jc.timer = time.AfterFunc(head.timeout, jc.expire)
	}
	return jc
}

func (jc *jobCall) received(data []byte) {
	jc.mu.Lock()
	if jc.started {
		jc.mu.Unlock()
		return
	}
	if len(jc.req)+len(data) > maxRecv {
		jc.started = true
		jc.mu.Unlock()
		jc.answer(status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", len(jc.req)+len(data)-5, grpcwire.MaxRecvMsgSize))
		return
	}
	jc.req = append(jc.req, data...)
	jc.mu.Unlock()
}

// requestEnded: the worker's request is whole; relay it to the lone
// shard that serves jobs, or hand it to the local handler.
func (jc *jobCall) requestEnded() {
	jc.mu.Lock()
	if jc.started || jc.gone {
		jc.mu.Unlock()
		return
	}
	jc.started = true
	raw := jc.req
	jc.mu.Unlock()
	p := jc.f.p
	msg, err := grpcwire.OneMessage(raw)
	if err != nil {
		jc.answer(err)
		return
	}
	req, err := readActivation(msg)
	if err != nil {
		jc.answer(status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err))
		return
	}
	if err := grpcfront.ValidActivation(req); err != nil {
		jc.answer(err)
		return
	}
	s, n := loneJobShard(p, jc.rh.tenant)
	if n == 0 {
		if !p.ServesAnywhere(jc.rh.tenant) {
			jc.answer(route.UnservedTenant(jc.rh.tenant))
			return
		}
		jc.answer(grpcfront.ErrNoJobShard)
		return
	}
	if n > 1 || s.Conn.Frames == nil {
		jc.toLocal(raw)
		return
	}
	// The shard's own long poll ends first; the margin only bounds a
	// shard that does not answer. No long poll: one sweep.
	timeout, budget := int64(-1), grpcfront.SweepTimeout
	if wait := grpcfront.PollWait(req, jc.deadline); wait > 0 {
		timeout, budget = wait.Milliseconds(), wait+time.Second
	}
	body := raw // as the worker sent it, unless its long poll must be shorter
	if timeout != req.GetRequestTimeout() {
		// A field given twice takes its last value: the shorter poll goes
		// after the worker's message, which stays as it came.
		body = append(make([]byte, 0, len(raw)+protowire.SizeTag(activateTimeout)+protowire.SizeVarint(uint64(timeout))), raw...)
		body = protowire.AppendTag(body, activateTimeout, protowire.VarintType)
		body = grpcwire.SetPrefix(protowire.AppendVarint(body, uint64(timeout)))
	}
	c, err := s.Conn.Frames.OwnConn()
	if errors.Is(err, upstream.ErrNoRoom) {
		jc.toLocal(raw) // it may wait for room; a reader may not
		return
	}
	if err != nil {
		// The shard's trouble is not the worker's: no jobs, as the local
		// handler answers.
		s.NoteError(upstream.OpenError(s.ID, err))
		jc.answer(nil)
		return
	}
	if err := p.Enter(s, "ActivateJobs"); err != nil {
		jc.answer(nil) // the proxy's limit: no jobs from this shard now
		return
	}
	var head [upstream.HeadLen]hpack.HeaderField
	fields := upstream.RequestHead(head[:0], s.Conn.Frames, s.Addr, activateJobsPath, time.Now().Add(budget), jc.rh.auth, jc.rh.tenant)
	jc.mu.Lock()
	jc.s, jc.act, jc.remaining = s, req, int(req.GetMaxJobsToActivate())
	jc.mu.Unlock()
	us, err := c.Request(fields, body, jc, true)
	if err != nil {
		p.Leave(s, "ActivateJobs", upstream.OpenError(s.ID, err), false)
		jc.answer(nil)
		return
	}
	// The call stays a long call until the shard's poll ends, not only
	// until the worker is answered: a stopping proxy ends it.
	remove := p.LongCalls().AddFunc(jc.proxyStopping)
	jc.mu.Lock()
	jc.up = us
	ended := jc.upEnd
	if !ended {
		jc.endLong = remove
	}
	jc.mu.Unlock()
	switch {
	case ended:
		remove()
	case p.Stopping().Err() != nil:
		jc.proxyStopping() // it stopped before the call was registered
	}
}

// toLocal runs the call in the proxy's own handler, as one that is not
// relayed would be.
func (jc *jobCall) toLocal(raw []byte) {
	f := jc.f
	if jc.timer != nil {
		jc.timer.Stop()
	}
	ctx, cancel := f.ctxFor(&jc.rh, jc.fields)
	lc := &localCall{f: f, fc: jc.fc, s: jc.cs, m: localMethods[activateJobsPath], ctx: ctx, cancel: cancel, req: raw}
	jc.cs.Value = lc
	lc.requestEnded()
}

// loneJobShard is the shard that serves jobs of a physical tenant when
// there is one, and how many there are.
func loneJobShard(p *grpcfront.Server, tenant string) (*route.Shard, int) {
	var lone *route.Shard
	n := 0
	for _, s := range p.Snapshot() {
		if s.ServesJobs() && s.Serves(tenant) {
			lone, n = s, n+1
		}
	}
	return lone, n
}

// The shard's side of the poll, heard on the upstream connection.

func (jc *jobCall) Head(_ *h2.Stream, fields []hpack.HeaderField, end bool) {
	if !end {
		return
	}
	jc.upstreamEnded(grpcwire.Status(fields, "200"))
}

func (jc *jobCall) Data(us *h2.Stream, data []byte, end bool) {
	jc.mu.Lock()
	give, tooLarge := jc.buf.Add(data)
	if tooLarge {
		jc.mu.Unlock()
		jc.abort(us, status.Newf(codes.ResourceExhausted, "grpc: received message larger than max (%d)", grpcwire.MaxRespMsgSize))
		return
	}
	var batches []paced
	for {
		msg, owe, ok := jc.buf.Next()
		if !ok {
			break
		}
		batches = append(batches, paced{msg, owe})
	}
	give += jc.buf.Partial()
	jc.mu.Unlock()
	if give > 0 {
		us.Consumed(give)
	}
	for _, b := range batches {
		jc.relay(us, b.msg, b.owe)
	}
	if end {
		jc.upstreamEnded(status.New(codes.Internal, "the shard ended the response without trailers"))
	}
}

// paced is a message of the shard's and the window it owes.
type paced struct {
	msg []byte
	owe int
}

func (jc *jobCall) Closed(err error) {
	var se http2.StreamError
	switch {
	case h2.Refused(err):
		jc.upstreamEnded(status.New(codes.Unavailable, "connection error: the shard refused the stream"))
	case errors.As(err, &se):
		jc.upstreamEnded(status.New(grpcwire.ResetCode(se.Code, time.Time{}), fmt.Sprintf("stream reset: %v", se.Code)))
	default:
		jc.upstreamEnded(status.Newf(codes.Unavailable, "the connection to the shard ended: %v", err))
	}
}

// relay passes one of the shard's batches (prefixed) on to the worker
// within the count it asked for, its keys stamped with the shard's slot;
// what the worker will not get is handed back.
func (jc *jobCall) relay(up *h2.Stream, framedMsg []byte, owe int) {
	p := jc.f.p
	raw := framedMsg[5:]
	jc.mu.Lock()
	s, gone := jc.s, jc.gone
	n := pbkeys.WireCount(raw, batchJobsField)
	keep := min(n, jc.remaining)
	if !gone {
		jc.remaining -= keep
	}
	jc.mu.Unlock()
	if gone || keep == 0 {
		reason := "surplus"
		if gone {
			reason = "worker gone"
		}
		if n > 0 {
			p.HandBack(s, batchJobs(raw), reason)
		}
		up.Consumed(owe)
		return
	}
	if keep < n {
		jobs := batchJobs(raw)
		p.HandBack(s, jobs[keep:], "surplus")
		raw, _ = proto.Marshal(&pb.ActivateJobsResponse{Jobs: jobs[:keep]})
	}
	out, err := stampWire(activateJobsResponse, raw, s.Slot)
	if err != nil {
		jc.abort(up, status.Newf(codes.Internal, "shard %s: the response does not parse: %v", s.ID, err))
		return
	}
	jc.wmu.Lock()
	if jc.answered {
		jc.wmu.Unlock()
		p.HandBack(s, batchJobs(raw), "worker gone")
		up.Consumed(owe)
		return
	}
	if !jc.headSent {
		jc.headSent = true
		err = jc.cs.WriteHeaders(okHead, false)
	}
	if err == nil {
		err = jc.cs.WriteData(out, false)
	}
	jc.wmu.Unlock()
	if err != nil {
		p.HandBack(s, batchJobs(raw), "worker gone")
		up.Consumed(owe)
		return
	}
	jc.mu.Lock()
	jc.written += len(out)
	jc.sent = append(jc.sent, sentBatch{end: jc.written, raw: raw})
	jc.owed += owe
	jc.mu.Unlock()
	jc.settle(up)
}

// settle looks at what the worker's stream still holds: batches it got
// whole are done and their window goes back to the shard; while some
// wait for the worker's window, one goroutine waits with them; those
// the stream ended without are handed back.
func (jc *jobCall) settle(up *h2.Stream) {
	unsent, ended := jc.cs.Unsent()
	jc.mu.Lock()
	if jc.waiting && !ended && unsent > 0 {
		jc.mu.Unlock()
		return // the waiter settles
	}
	var lost [][]byte
	delivered := jc.written - unsent
	i := 0
	for i < len(jc.sent) && jc.sent[i].end <= delivered {
		i++
	}
	if ended {
		for _, b := range jc.sent[i:] {
			lost = append(lost, b.raw)
		}
		i = len(jc.sent)
	}
	jc.sent = jc.sent[i:]
	if up == nil {
		up = jc.up
	}
	give := 0
	if len(jc.sent) == 0 && up != nil {
		give, jc.owed = jc.owed, 0
	}
	wait := !ended && unsent > 0 && !jc.waiting
	jc.waiting = wait
	s := jc.s
	jc.mu.Unlock()
	for _, raw := range lost {
		jc.f.p.HandBack(s, batchJobs(raw), "worker gone")
	}
	if give > 0 {
		up.Consumed(give)
	}
	if !wait {
		return
	}
	jc.f.handlers.Go(func() {
		<-jc.cs.Drained()
		jc.mu.Lock()
		jc.waiting = false
		jc.mu.Unlock()
		jc.settle(up)
	})
}

// upstreamEnded: the shard's poll is over, with st. The worker hears
// its status as the local handler would say it: the shard's refusal of
// every poll as RESOURCE_EXHAUSTED, any other trouble of the shard's as
// no jobs.
func (jc *jobCall) upstreamEnded(st *status.Status) {
	p := jc.f.p
	jc.mu.Lock()
	if jc.upEnd {
		jc.mu.Unlock()
		return
	}
	jc.upEnd = true
	s, act, reset := jc.s, jc.act, jc.reset
	delivered := act != nil && jc.remaining < int(act.GetMaxJobsToActivate())
	endLong := jc.endLong
	jc.mu.Unlock()
	var err error
	if st.Code() != codes.OK {
		err = st.Err()
	}
	p.Leave(s, "ActivateJobs", err, reset)
	if endLong != nil {
		endLong()
	}
	switch {
	case err == nil:
		jc.answer(nil)
	case st.Code() == codes.ResourceExhausted && !delivered:
		jc.answer(grpcfront.ExhaustedShards(act))
	default:
		s.NoteError(err)
		jc.answer(nil)
	}
}

// abort ends the shard's poll with st, and resets it.
func (jc *jobCall) abort(up *h2.Stream, st *status.Status) {
	jc.mu.Lock()
	jc.reset = true
	jc.mu.Unlock()
	jc.upstreamEnded(st)
	up.Reset(http2.ErrCodeCancel)
}

// cancelled resets the shard's poll: what it ends with is the
// proxy's doing, not the shard's.
func (jc *jobCall) cancelled(up *h2.Stream) {
	jc.mu.Lock()
	jc.reset = true
	if up == nil {
		up = jc.up
	}
	jc.mu.Unlock()
	if up != nil {
		up.Reset(http2.ErrCodeCancel)
	}
}

// answer ends the worker's stream with err's status, once: in the
// trailers after the batches, or a trailers-only answer.
func (jc *jobCall) answer(err error) {
	if jc.timer != nil {
		jc.timer.Stop()
	}
	jc.wmu.Lock()
	if jc.answered {
		jc.wmu.Unlock()
		return
	}
	jc.answered = true
	var head []hpack.HeaderField
	if !jc.headSent {
		head = okHead
	}
	st := status.Convert(err)
	_ = jc.cs.WriteHeaders(grpcwire.StatusFields(head, st), true)
	jc.wmu.Unlock()
	jc.f.p.Metrics().Observe("ActivateJobs", st.Code(), time.Since(jc.start))
}

// The worker's side.

// clientGone: the worker reset its stream, or its connection ended.
// The shard's poll runs on, and what it brings is handed back; so are
// the batches the worker did not get.
func (jc *jobCall) clientGone() {
	jc.mu.Lock()
	wasGone := jc.gone
	jc.gone = true
	jc.mu.Unlock()
	if wasGone {
		return
	}
	jc.wmu.Lock()
	answered := jc.answered
	jc.answered = true
	jc.wmu.Unlock()
	if jc.timer != nil {
		jc.timer.Stop()
	}
	if !answered {
		jc.f.p.Metrics().Observe("ActivateJobs", codes.Canceled, time.Since(jc.start))
	}
	jc.settle(nil)
}

// expire answers at the worker's deadline; the shard's poll, which was
// given less time, runs on and hands back what it brings.
func (jc *jobCall) expire() {
	jc.mu.Lock()
	jc.gone = true
	jc.mu.Unlock()
	jc.answer(status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
}

// proxyStopping: the proxy is stopping and ends its long calls. The
// worker gets its answer now (no jobs is a normal answer: it polls
// again, elsewhere), and the shard's poll is cancelled.
func (jc *jobCall) proxyStopping() {
	jc.mu.Lock()
	jc.gone = true
	jc.mu.Unlock()
	jc.answer(nil)
	jc.cancelled(nil)
}

// The fields of a worker's poll the proxy reads.
var (
	activateType    = activateJobsField("type")
	activateMax     = activateJobsField("maxJobsToActivate")
	activateTimeout = activateJobsField("requestTimeout")
)

// batchJobsField is where a batch (ActivateJobsResponse) holds its jobs.
var batchJobsField = activateJobsResponse.Fields().ByName("jobs").Number()

func activateJobsField(name string) protowire.Number {
	return (&pb.ActivateJobsRequest{}).ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name)).Number()
}

// readActivation reads what the proxy checks of a worker's poll off the
// wire (as a parser would: the last value of each field); the shard
// gets the message as it came.
func readActivation(m []byte) (*pb.ActivateJobsRequest, error) {
	req := &pb.ActivateJobsRequest{}
	for len(m) > 0 {
		num, typ, n := protowire.ConsumeTag(m)
		if n < 0 {
			return nil, pbkeys.ErrMalformed
		}
		m = m[n:]
		vn := protowire.ConsumeFieldValue(num, typ, m)
		if vn < 0 {
			return nil, pbkeys.ErrMalformed
		}
		switch {
		case num == activateType && typ == protowire.BytesType:
			b, _ := protowire.ConsumeBytes(m)
			if !utf8.Valid(b) {
				return nil, errors.New("string field contains invalid UTF-8")
			}
			req.Type = string(b)
		case num == activateMax && typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(m)
			req.MaxJobsToActivate = int32(v)
		case num == activateTimeout && typ == protowire.VarintType:
			v, _ := protowire.ConsumeVarint(m)
			req.RequestTimeout = int64(v)
		}
		m = m[vn:]
	}
	return req, nil
}

// batchJobs decodes a batch's jobs, to hand them back.
func batchJobs(raw []byte) []*pb.ActivatedJob {
	var resp pb.ActivateJobsResponse
	if err := proto.Unmarshal(raw, &resp); err != nil {
		return nil
	}
	return resp.GetJobs()
}
