package framefront

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/h2"
	"github.com/shardctl/shardctl/internal/keyslot"
	"github.com/shardctl/shardctl/internal/proxy/grpcfront"
	"github.com/shardctl/shardctl/internal/proxy/grpcwire"
	"github.com/shardctl/shardctl/internal/proxy/pbkeys"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/proxy/upstream"
)

// maxRecv is the largest request the front takes, framed.
const maxRecv = grpcwire.MaxRecvMsgSize + 5

// fastCall is one unary call the frame front forwards to one shard. It
// buffers the request message, routes it as the grpc-go front would
// (byKey, or placed by power of two choices), sends it as frames and
// answers with the shard's response, its keys stamped with the slot.
type fastCall struct {
	p *grpcfront.Server
	// s is the client's stream; without one (a call of Unary's) the
	// answer goes to answered.
	s        *h2.Stream
	answered chan unaryAnswer
	m        *fastMethod
	path     string
	auth     string
	tenant   string
	start    time.Time
	// deadline of the client's grpc-timeout (zero: none); timer ends
	// the call there.
	deadline time.Time
	timer    *time.Timer

	mu    sync.Mutex
	req   []byte // the request as received: prefix and message
	state callState
	up    *h2.Stream // the attempt in flight
	// placement: the message sent to each shard tried, the shards
	// tried, and why the last one did not take it.
	body      []byte
	tried     []*route.Shard
	triedOn   [4]*route.Shard
	lastErr   error
	exhausted bool
	// first is the first attempt, allocated with the call (unused while
	// its c is nil).
	first attempt
}

type callState int

const (
	receiving callState = iota
	routing
	done
)

func newFastCall(p *grpcfront.Server, s *h2.Stream, m *fastMethod, req *requestHead) *fastCall {
	c := &fastCall{p: p, s: s, m: m, path: req.path, auth: req.auth, tenant: req.tenant, start: time.Now()}
	c.tried = c.triedOn[:0]
	if req.hasTimeout {
		c.deadline = c.start.Add(req.timeout)
		c.timer = time.AfterFunc(req.timeout, c.expire)
	}
	return c
}

// received collects the request.
func (c *fastCall) received(data []byte) {
	c.mu.Lock()
	if c.state != receiving {
		c.mu.Unlock()
		return
	}
	if len(c.req)+len(data) > maxRecv {
		c.mu.Unlock()
		c.finish(status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", len(c.req)+len(data)-5, grpcwire.MaxRecvMsgSize))
		return
	}
	c.req = append(c.req, data...)
	c.mu.Unlock()
}

// requestEnded: the client's side is done; route the call.
func (c *fastCall) requestEnded() {
	c.mu.Lock()
	if c.state != receiving {
		c.mu.Unlock()
		return
	}
	c.state = routing
	req := c.req
	c.mu.Unlock()
	msg, err := grpcwire.OneMessage(req)
	if err != nil {
		c.finish(err)
		return
	}
	c.route(msg)
}

func (c *fastCall) route(msg []byte) {
	p, m := c.p, c.m
	var key int64
	if m.key != 0 {
		k, err := pbkeys.WireInt64(msg, m.key)
		if err != nil {
			c.finish(status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err))
			return
		}
		key = k
	}
	if m.create && !keyslot.None(key) && key > 0 {
		src, raw, err := p.ShardForKey(key)
		if err != nil {
			c.finish(err)
			return
		}
		pid, ok := p.Ledger().Process(src.ID, raw)
		if !ok {
			c.byKey(msg, key) // only the shard that issued it runs it
			return
		}
		req := &pb.CreateProcessInstanceRequest{}
		if err := proto.Unmarshal(msg, req); err != nil {
			c.finish(status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err))
			return
		}
		req.ProcessDefinitionKey, req.BpmnProcessId, req.Version = 0, pid.BpmnProcessID, pid.Version
		b, _ := proto.MarshalOptions{}.MarshalAppend(grpcwire.Framed(proto.Size(req)), req)
		c.place(grpcwire.SetPrefix(b))
		return
	}
	if m.key != 0 && !(m.place && (keyslot.None(key) || key <= 0)) {
		c.byKey(msg, key)
		return
	}
	c.place(grpcwire.SetPrefix(append(grpcwire.Framed(len(msg)), msg...)))
}

// byKey sends the call to the shard in its key, the keys stripped of
// their slot.
func (c *fastCall) byKey(msg []byte, key int64) {
	p := c.p
	s, _, err := p.ShardForKey(key)
	if err == nil && s.Down() {
		err = route.DownError(s)
	}
	if err != nil {
		c.finish(err)
		return
	}
	body, err := pbkeys.RewriteWire(grpcwire.Framed(len(msg)), msg, c.m.in, p.StripFor(s))
	if err != nil {
		if errors.Is(err, pbkeys.ErrMalformed) {
			err = status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
		}
		c.finish(err)
		return
	}
	if err := c.send(s, grpcwire.SetPrefix(body), false); err != nil {
		c.finish(grpcfront.OnShard(s, err))
	}
}

// place sends the call to the shard power of two choices picks, and on
// to the next as place does.
func (c *fastCall) place(body []byte) {
	c.mu.Lock()
	c.body = body
	c.mu.Unlock()
	c.next()
}

func (c *fastCall) next() {
	p := c.p
	now := time.Now()
	for {
		c.mu.Lock()
		if c.state == done {
			c.mu.Unlock()
			return
		}
		s := p.Pick(now, c.tried, c.tenant)
		if s == nil {
			c.mu.Unlock()
			break
		}
		c.tried = append(c.tried, s)
		body := c.body
		c.mu.Unlock()
		s.Placing.Add(1)
		err := c.send(s, body, true)
		if err == nil {
			return
		}
		s.Placing.Add(-1)
		c.mu.Lock()
		c.lastErr = err
		c.mu.Unlock()
		if !errors.As(err, new(*route.LimitError)) && !route.NeverSent(err) {
			c.finish(grpcfront.OnShard(s, err))
			return
		}
	}
	c.mu.Lock()
	lastErr, exhausted := c.lastErr, c.exhausted
	c.mu.Unlock()
	c.finish(p.PlacementFailed(c.tenant, lastErr, exhausted))
}

// attempt is one send of a call to a shard.
type attempt struct {
	c       *fastCall
	s       *route.Shard
	placing bool
	sent    time.Time
	status  string // the response's :status
	resp    []byte
	ended   bool
}

// send starts an attempt on s; an error means nothing was sent.
func (c *fastCall) send(s *route.Shard, body []byte, placing bool) error {
	p := c.p
	if err := p.Enter(s, c.m.rpc); err != nil {
		return err
	}
	a := c.newAttempt(s, placing)
	var head [upstream.HeadLen]hpack.HeaderField
	fields := upstream.RequestHead(head[:0], s.Conn.Frames, s.Addr, c.path, c.deadline, c.auth, c.tenant)
	var up *h2.Stream
	var err error
	if c.s != nil {
		up, err = s.Conn.Frames.Open(fields, body, a)
	} else {
		up, err = s.Conn.Frames.OpenShared(fields, body, a)
	}
	if err != nil {
		err = upstream.OpenError(s.ID, err)
		p.Leave(s, c.m.rpc, err, false)
		return err
	}
	c.mu.Lock()
	gone := c.state == done
	c.up = up
	c.mu.Unlock()
	if gone {
		up.Reset(http2.ErrCodeCancel)
	}
	return nil
}

// newAttempt is the call's first attempt, made with the call, or a new
// one: most calls take one, and a retry must not reuse an attempt its
// stream may still report to.
func (c *fastCall) newAttempt(s *route.Shard, placing bool) *attempt {
	v := attempt{c: c, s: s, placing: placing, sent: time.Now()}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.c == nil {
		c.first = v
		return &c.first
	}
	a := new(attempt)
	*a = v
	return a
}

func (a *attempt) Head(_ *h2.Stream, fields []hpack.HeaderField, end bool) {
	for _, f := range fields {
		if f.Name == ":status" {
			a.status = f.Value
		}
	}
	if end {
		st := grpcwire.Status(fields, a.status)
		a.end(st.Code(), st.Message(), false)
	}
}

func (a *attempt) Data(s *h2.Stream, data []byte, end bool) {
	if len(a.resp)+len(data) > grpcwire.MaxRespMsgSize+5 {
		s.Reset(http2.ErrCodeCancel)
		return
	}
	a.resp = append(a.resp, data...)
	if end {
		a.end(codes.Internal, "the shard ended the response without trailers", false)
	}
}

func (a *attempt) Closed(err error) {
	var se http2.StreamError
	switch {
	case h2.Refused(err):
		a.end(codes.Unavailable, "connection error: the shard refused the stream", true)
	case errors.As(err, &se):
		a.end(grpcwire.ResetCode(se.Code, a.c.deadline), fmt.Sprintf("stream reset: %v", se.Code), false)
	default:
		a.end(codes.Unavailable, fmt.Sprintf("the connection to the shard ended: %v", err), false)
	}
}

// end is an attempt's outcome; neverProcessed: the shard says it did
// not take the call.
func (a *attempt) end(code codes.Code, msg string, neverProcessed bool) {
	if a.ended {
		return
	}
	a.ended = true
	c, p, s := a.c, a.c.p, a.s
	var err error
	if code != codes.OK {
		err = status.Error(code, msg)
	}
	c.mu.Lock()
	gone := c.state == done
	c.up = nil
	c.mu.Unlock()
	p.Leave(s, c.m.rpc, err, gone)
	now := time.Now()
	if a.placing {
		s.Placing.Add(-1)
		if code == codes.OK || code == codes.DeadlineExceeded {
			s.ObserveLatency(now.Sub(a.sent), now)
		}
	}
	if gone {
		return
	}
	switch {
	case code == codes.OK:
		out, err := a.stamped()
		if err != nil {
			c.finish(err)
			return
		}
		if a.placing {
			s.Choices.Inc()
			switch {
			case c.m.create:
				s.NotePlaced(1)
			case c.m.started != 0:
				msg, _ := grpcwire.OneMessage(out)
				s.NotePlaced(int64(pbkeys.WireCount(msg, c.m.started)))
			}
		}
		if c.claim() {
			c.reply(out, nil)
		}
	case a.placing && code == codes.ResourceExhausted:
		p.CoolOff(s, err)
		c.mu.Lock()
		c.exhausted, c.lastErr = true, err
		c.mu.Unlock()
		c.next()
	case a.placing && neverProcessed:
		c.mu.Lock()
		c.lastErr = err
		c.mu.Unlock()
		c.next()
	default:
		c.finish(grpcfront.OnShard(s, err))
	}
}

// stamped is the response with the shard's slot in its keys.
func (a *attempt) stamped() ([]byte, error) {
	msg, err := grpcwire.OneMessage(a.resp)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "shard %s: %s", a.s.ID, status.Convert(err).Message())
	}
	out, err := stampWire(a.c.m.out, msg, a.s.Slot)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "shard %s: the response does not parse: %v", a.s.ID, err)
	}
	return out, nil
}

// stampWire is message msg of type md, prefixed for the wire, with the
// shard's slot in its keys.
func stampWire(md protoreflect.MessageDescriptor, msg []byte, slot int) ([]byte, error) {
	out, err := pbkeys.RewriteWire(grpcwire.Framed(len(msg)), msg, md, func(_ protoreflect.FieldDescriptor, k int64) (int64, error) { return keyslot.With(k, slot), nil })
	if err != nil {
		return nil, err
	}
	return grpcwire.SetPrefix(out), nil
}

// finish answers the client with err, once.
func (c *fastCall) finish(err error) {
	if c.claim() {
		c.reply(nil, err)
	}
}

// claim marks the call answered; false: it already was.
func (c *fastCall) claim() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == done {
		return false
	}
	c.state = done
	return true
}

// The heads of every answer.
var (
	okHead     = []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
	okTrailers = []hpack.HeaderField{{Name: "grpc-status", Value: "0"}}
)

// reply writes the answer: the response, or err in a trailers-only
// response.
func (c *fastCall) reply(resp []byte, err error) {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.s == nil {
		c.answered <- unaryAnswer{resp, err}
		c.p.Metrics().Observe(c.m.rpc, status.Code(err), time.Since(c.start))
		return
	}
	if err == nil {
		_ = c.s.Respond(okHead, resp, okTrailers)
		c.p.Metrics().Observe(c.m.rpc, codes.OK, time.Since(c.start))
		return
	}
	st := status.Convert(err)
	_ = c.s.WriteHeaders(grpcwire.StatusFields(okHead, st), true)
	c.p.Metrics().Observe(c.m.rpc, st.Code(), time.Since(c.start))
}

// expire ends a call at the client's deadline.
func (c *fastCall) expire() {
	up, ok := c.abandon()
	if !ok {
		return
	}
	if up != nil {
		up.Reset(http2.ErrCodeCancel)
	}
	c.reply(nil, status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
}

// clientGone: the client reset the stream or its connection ended.
func (c *fastCall) clientGone() {
	up, ok := c.abandon()
	if !ok {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	if up != nil {
		up.Reset(http2.ErrCodeCancel)
	}
	c.p.Metrics().Observe(c.m.rpc, codes.Canceled, time.Since(c.start))
}

// abandon marks the call done and returns the attempt in flight; false:
// it was answered already.
func (c *fastCall) abandon() (*h2.Stream, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == done {
		return nil, false
	}
	c.state = done
	return c.up, true
}

// Both kinds of call hear their shard's answer on the upstream pool.
var (
	_ upstream.Call = (*attempt)(nil)
	_ upstream.Call = (*jobCall)(nil)
)
