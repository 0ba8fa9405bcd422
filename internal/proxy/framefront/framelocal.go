package framefront

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/h2"
	"github.com/shardctl/shardctl/internal/proxy/grpcfront"
	"github.com/shardctl/shardctl/internal/proxy/grpcwire"
)

// localMethod is a gateway RPC the frame front runs in the proxy's own
// handlers (server.go, jobs.go) as grpc-go would, without grpc-go's
// server transport: deployments, job polls and streams, fan-outs,
// Topology. The Zeebe client's generated code keeps its service
// descriptor to itself, so the handlers are found by name.
type localMethod struct {
	rpc string
	in  protoreflect.MessageType
	// unary is the handler of a unary RPC (a method of *grpcfront.Server, by
	// reflection); stream runs a server-streaming one.
	unary  reflect.Value
	stream func(sv *grpcfront.Server, req proto.Message, s *localStream) error
}

var localMethods = func() map[string]*localMethod {
	out := map[string]*localMethod{}
	sv := reflect.TypeOf(&grpcfront.Server{})
	methods := pb.File_gatewaypb_gateway_proto.Services().ByName("Gateway").Methods()
	for i := 0; i < methods.Len(); i++ {
		md := methods.Get(i)
		in, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			panic(err) // the generated code registers every type it has
		}
		m := &localMethod{rpc: string(md.Name()), in: in}
		switch {
		case md.IsStreamingClient():
			continue // none in the gateway API; grpc-go would answer
		case md.Name() == "ActivateJobs":
			m.stream = func(sv *grpcfront.Server, req proto.Message, s *localStream) error {
				return sv.ActivateJobs(req.(*pb.ActivateJobsRequest), activateJobsStream{s})
			}
		case md.Name() == "StreamActivatedJobs":
			m.stream = func(sv *grpcfront.Server, req proto.Message, s *localStream) error {
				return sv.StreamActivatedJobs(req.(*pb.StreamActivatedJobsRequest), jobStream{s})
			}
		case md.IsStreamingServer():
			continue
		default:
			fn, ok := sv.MethodByName(string(md.Name()))
			if !ok {
				continue
			}
			m.unary = fn.Func
		}
		out["/"+gatewayService+"/"+string(md.Name())] = m
	}
	return out
}()

type activateJobsStream struct{ *localStream }

func (s activateJobsStream) Send(r *pb.ActivateJobsResponse) error { return s.SendMsg(r) }

type jobStream struct{ *localStream }

func (s jobStream) Send(j *pb.ActivatedJob) error { return s.SendMsg(j) }

// localCall is one call run by a local handler: the request is
// collected from the client's frames, then the handler runs in a
// goroutine of its own and writes its answers on the client's stream.
type localCall struct {
	f      *Front
	fc     *frontConn
	s      *h2.Stream
	m      *localMethod
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	req     []byte
	started bool
	reset   bool // the client reset the stream
	// written by the handler's goroutine only
	headSent bool
}

// ctxFor is the context a local handler runs in: the client's deadline,
// its metadata, cancelled when the client resets the stream or the
// proxy cuts its work short.
func (f *Front) ctxFor(head *requestHead, fields []hpack.HeaderField) (context.Context, context.CancelFunc) {
	var ctx context.Context
	var cancel context.CancelFunc
	if head.hasTimeout {
		ctx, cancel = context.WithTimeout(f.p.Background(), head.timeout)
	} else {
		ctx, cancel = context.WithCancel(f.p.Background())
	}
	md := metadata.MD{}
	for _, hf := range fields {
		if !strings.HasPrefix(hf.Name, ":") && !grpcwire.ReservedHeader(hf.Name) {
			md.Append(hf.Name, hf.Value)
		}
	}
	return metadata.NewIncomingContext(ctx, md), cancel
}

func (f *Front) local(fc *frontConn, s *h2.Stream, m *localMethod, head *requestHead, fields []hpack.HeaderField, end bool) {
	ctx, cancel := f.ctxFor(head, fields)
	c := &localCall{f: f, fc: fc, s: s, m: m, ctx: ctx, cancel: cancel}
	s.Value = c
	if end {
		fc.ended = append(fc.ended, c)
	}
}

func (c *localCall) received(data []byte) {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return
	}
	if len(c.req)+len(data) > maxRecv {
		c.started = true
		c.mu.Unlock()
		c.cancel()
		c.finish(status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", len(c.req)+len(data)-5, grpcwire.MaxRecvMsgSize))
		c.s.Reset(http2.ErrCodeNo)
		return
	}
	c.req = append(c.req, data...)
	c.mu.Unlock()
}

// requestEnded runs the handler, in a goroutine the front waits for,
// unless the client reset the stream first.
func (c *localCall) requestEnded() {
	c.mu.Lock()
	if c.started || c.reset {
		c.mu.Unlock()
		return
	}
	c.started = true
	req := c.req
	c.mu.Unlock()
	started := c.fc.startHandler(c.s, func() {
		defer c.cancel()
		msg, err := grpcwire.OneMessage(req)
		if err == nil {
			err = c.run(msg)
		}
		if !errors.Is(err, errAnswered) {
			c.finish(err)
		}
	})
	if !started {
		c.cancel()
	}
}

func (c *localCall) run(msg []byte) error {
	sv := c.f.p
	req := c.m.in.New().Interface()
	if err := proto.Unmarshal(msg, req); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	if c.m.stream != nil {
		return c.m.stream(sv, req, &localStream{c: c})
	}
	out := c.m.unary.Call([]reflect.Value{reflect.ValueOf(sv), reflect.ValueOf(c.ctx), reflect.ValueOf(req)})
	if err, _ := out[1].Interface().(error); err != nil {
		return err
	}
	// A unary answer goes whole: nothing is left to do while it drains.
	b, err := grpcwire.MarshalFramed(out[0].Interface())
	if err != nil {
		return err
	}
	c.headSent = true
	if c.s.Respond(okHead, b, okTrailers) != nil {
		return c.gone()
	}
	return errAnswered
}

// errAnswered: the handler's answer went out with its status.
var errAnswered = errors.New("answered")

// send writes one response message, waiting while the client's window
// is full: a slow reader holds its handler, not the proxy's memory.
func (c *localCall) send(m any) error {
	b, err := grpcwire.MarshalFramed(m)
	if err != nil {
		return err
	}
	if !c.headSent {
		c.headSent = true
		if err := c.s.WriteHeaders(okHead, false); err != nil {
			return c.gone()
		}
	}
	if err := c.s.WriteData(b, false); err != nil {
		return c.gone()
	}
	select {
	case <-c.s.Drained():
		return nil
	case <-c.ctx.Done():
	}
	// Given up: a message the client got none of is taken back, so that
	// the caller may hand its jobs back; one partly sent stays queued
	// and reaches the client if it reads again (as grpc-go's transport
	// keeps what it queued).
	if c.s.Withdraw(len(b)) {
		return status.FromContextError(c.ctx.Err()).Err()
	}
	return nil
}

// gone is a write on a stream the client ended.
func (c *localCall) gone() error {
	if err := c.ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Canceled, "the client ended the stream")
}

// finish ends the stream with the call's status: in the trailers, or a
// trailers-only answer when nothing was sent.
func (c *localCall) finish(err error) {
	var head []hpack.HeaderField
	if !c.headSent {
		head = okHead
	}
	_ = c.s.WriteHeaders(grpcwire.StatusFields(head, status.Convert(err)), true)
}

// clientGone: the client reset the stream or its connection ended.
func (c *localCall) clientGone() {
	c.mu.Lock()
	c.reset = true
	c.mu.Unlock()
	c.cancel()
}

// localStream is the grpc.ServerStream a local streaming handler sees;
// its request was read already.
type localStream struct{ c *localCall }

func (s *localStream) SetHeader(metadata.MD) error  { return nil }
func (s *localStream) SendHeader(metadata.MD) error { return nil }
func (s *localStream) SetTrailer(metadata.MD)       {}
func (s *localStream) Context() context.Context     { return s.c.ctx }
func (s *localStream) SendMsg(m any) error          { return s.c.send(m) }
func (s *localStream) RecvMsg(any) error            { return io.EOF }
