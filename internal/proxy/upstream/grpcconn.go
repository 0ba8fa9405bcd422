package upstream

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shardctl/shardctl/internal/h2"
	"github.com/shardctl/shardctl/internal/proxy/grpcwire"
	"github.com/shardctl/shardctl/internal/restgateway"
	"github.com/shardctl/shardctl/internal/shardconn"
)

// grpcConn is the frame front's gRPC client of one shard: the proxy's
// own calls to it (job polls and streams, fan-outs, health checks, jobs
// handed back) go as streams on the connections forwarded calls use,
// not through grpc-go's client transport, whose per-call machinery
// costs more than the proxy's whole job path. Every gateway RPC takes
// exactly one request message, so a call is sent whole with it.
type grpcConn struct {
	u         *Pool
	id        string // the shard's, for errors
	authority string
}

var _ grpc.ClientConnInterface = (*grpcConn)(nil)

// Invoke runs a unary call.
func (sc *grpcConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	st := sc.stream(ctx, method)
	if err := st.SendMsg(args); err != nil {
		return err
	}
	if err := st.RecvMsg(reply); err != nil {
		if errors.Is(err, io.EOF) {
			return status.Error(codes.Internal, "the shard ended the call without a response")
		}
		return err
	}
	switch err := st.RecvMsg(nil); {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		st.cancel()
		return status.Error(codes.Internal, "the shard sent more than one response to a unary call")
	default:
		return err
	}
}

// NewStream starts a streaming call; the request goes with SendMsg.
func (sc *grpcConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	if desc.ClientStreams {
		return nil, status.Errorf(codes.Unimplemented, "%s: the proxy sends one request per call", method)
	}
	return sc.stream(ctx, method), nil
}

func (sc *grpcConn) stream(ctx context.Context, method string) *rpcStream {
	return &rpcStream{sc: sc, ctx: ctx, method: method, notify: make(chan struct{}, 1)}
}

// HeadLen is how many fields RequestHead writes at most: a
// caller's buffer of this many takes a forwarded call's head without an
// allocation.
const HeadLen = 9

// RequestHead appends the request head of a call to a shard to dst,
// with the client's authorization and physical tenant when it sent them
// ("" for none).
func RequestHead(dst []hpack.HeaderField, u *Pool, authority, path string, deadline time.Time, auth, tenant string) []hpack.HeaderField {
	fields := append(dst,
		hpack.HeaderField{Name: ":method", Value: "POST"},
		hpack.HeaderField{Name: ":scheme", Value: u.scheme},
		hpack.HeaderField{Name: ":path", Value: path},
		hpack.HeaderField{Name: ":authority", Value: authority},
		hpack.HeaderField{Name: "content-type", Value: "application/grpc"},
		hpack.HeaderField{Name: "te", Value: "trailers"})
	if !deadline.IsZero() {
		// Never indexed: a value per call would churn the shard's header
		// table and push out the fields every call repeats.
		fields = append(fields, hpack.HeaderField{Name: "grpc-timeout", Value: grpcwire.FormatTimeout(time.Until(deadline)), Sensitive: true})
	}
	if auth != "" {
		fields = append(fields, hpack.HeaderField{Name: restgateway.AuthorizationMD, Value: auth, Sensitive: true})
	}
	if tenant != "" {
		fields = append(fields, hpack.HeaderField{Name: restgateway.PhysicalTenantMD, Value: tenant})
	}
	return fields
}

// Call is what hears a stream on the upstream connections: a
// forwarded call's attempt or one of the proxy's own calls.
type Call interface {
	Head(s *h2.Stream, fields []hpack.HeaderField, end bool)
	Data(s *h2.Stream, data []byte, end bool)
	Closed(err error)
}

// upstreamHandler hears the shards' answers on the frame front's
// connections.
type upstreamHandler struct{ u *Pool }

func (h upstreamHandler) Headers(s *h2.Stream, fields []hpack.HeaderField, end, _ bool) {
	s.Value.(Call).Head(s, fields, end)
	if end {
		h.u.streamEnded()
	}
}

func (h upstreamHandler) Data(s *h2.Stream, data []byte, end bool) {
	s.Value.(Call).Data(s, data, end)
	if end {
		h.u.streamEnded()
	}
}

func (h upstreamHandler) Closed(s *h2.Stream, err error) {
	s.Value.(Call).Closed(err)
	h.u.streamEnded()
}

// rpcStream is one of the proxy's own calls to a shard. The response's
// messages wait in buf until RecvMsg takes them, and the stream's window
// is given back only then: a slow reader holds one window of the shard's
// data, not all of it.
type rpcStream struct {
	sc     *grpcConn
	ctx    context.Context
	method string
	s      *h2.Stream
	stop   func() bool // ends the watch on ctx

	notify chan struct{} // one token: something changed

	mu         sync.Mutex
	httpStatus string
	header     metadata.MD
	trailer    metadata.MD
	buf        PacedMessages
	err        error // the call's end: io.EOF when it succeeded
}

var _ grpc.ClientStream = (*rpcStream)(nil)

// SendMsg sends the request and ends this side of the call.
func (r *rpcStream) SendMsg(m any) error {
	if r.s != nil {
		return status.Error(codes.Internal, "the proxy sends one request per call")
	}
	if err := r.ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	body, err := grpcwire.MarshalFramed(m)
	if err != nil {
		return err
	}
	deadline, _ := r.ctx.Deadline()
	md, _ := metadata.FromOutgoingContext(r.ctx)
	fields := RequestHead(make([]hpack.HeaderField, 0, HeadLen+len(md)), r.sc.u, r.sc.authority, r.method, deadline, "", "") // authorization and tenant, if any, are in md
	for k, vs := range md {
		if strings.HasPrefix(k, ":") || grpcwire.ReservedHeader(k) {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			fields = append(fields, hpack.HeaderField{Name: k, Value: v, Sensitive: k == shardconn.AuthorizationMD})
		}
	}
	s, err := r.sc.u.OpenOwn(r.ctx, fields, body, r)
	if err != nil {
		if cerr := r.ctx.Err(); cerr != nil {
			return status.FromContextError(cerr).Err()
		}
		return OpenError(r.sc.id, err)
	}
	stop := context.AfterFunc(r.ctx, func() { s.Reset(http2.ErrCodeCancel) })
	r.mu.Lock()
	r.s, r.stop = s, stop
	ended := r.err != nil
	r.mu.Unlock()
	if ended {
		stop()
	}
	return nil
}

func (r *rpcStream) CloseSend() error { return nil }

func (r *rpcStream) Context() context.Context { return r.ctx }

// Header waits for the response head.
func (r *rpcStream) Header() (metadata.MD, error) {
	for {
		r.mu.Lock()
		h, err := r.header, r.err
		r.mu.Unlock()
		if h != nil {
			return h, nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			return nil, err
		}
		<-r.notify
	}
}

// Trailer is the trailers, once the call has ended.
func (r *rpcStream) Trailer() metadata.MD {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.trailer
}

// RecvMsg takes the next response message into m (nil: only wait for
// one), io.EOF when the call ended well, its status when not.
func (r *rpcStream) RecvMsg(m any) error {
	for {
		r.mu.Lock()
		if msg, ok := r.nextLocked(); ok {
			r.mu.Unlock()
			if m == nil {
				return nil
			}
			if err := proto.Unmarshal(msg, m.(proto.Message)); err != nil {
				r.cancel()
				return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
			}
			return nil
		}
		err := r.err
		r.mu.Unlock()
		if err != nil {
			return err
		}
		<-r.notify
		// the token may be another event's: look again
	}
}

// nextLocked takes the first whole message out of buf and gives its
// window back to the shard.
func (r *rpcStream) nextLocked() ([]byte, bool) {
	msg, give, ok := r.buf.Next()
	if !ok {
		return nil, false
	}
	give += r.buf.Partial()
	if give > 0 && r.s != nil {
		r.s.Consumed(give)
	}
	return msg[5:], true
}

// PacedMessages are a paced stream's length-prefixed messages as their
// bytes arrive, with what the stream's window owes for them: the bytes
// of a message not yet whole are given back at once (a message may be
// larger than the window), those of a whole one once the reader is done
// with it.
type PacedMessages struct {
	buf   []byte
	acked int // how much of buf's front was given back already
}

// add appends data, or reports that the message would be larger than
// the proxy takes; give is the window to give back now.
func (m *PacedMessages) Add(data []byte) (give int, tooLarge bool) {
	if len(m.buf)+len(data) > grpcwire.MaxRespMsgSize+5 {
		return 0, true
	}
	if len(m.buf) == 0 {
		m.buf = append([]byte(nil), data...) // a fresh one: messages taken from the old one are still read
	} else {
		m.buf = append(m.buf, data...)
	}
	return m.Partial(), false
}

// next takes the first whole message out, prefix included, and what
// the window still owes for it.
func (m *PacedMessages) Next() (msg []byte, owe int, ok bool) {
	n, ok := grpcwire.WholeMessage(m.buf)
	if !ok {
		return nil, 0, false
	}
	msg = m.buf[:n]
	m.buf = m.buf[n:]
	owe = n - min(m.acked, n)
	m.acked -= n - owe
	return msg, owe, true
}

// partial gives back the bytes of a message not yet whole at the front.
func (m *PacedMessages) Partial() int {
	if _, whole := grpcwire.WholeMessage(m.buf); whole || len(m.buf) <= m.acked {
		return 0
	}
	give := len(m.buf) - m.acked
	m.acked = len(m.buf)
	return give
}

func (r *rpcStream) wake() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// cancel abandons the call.
func (r *rpcStream) cancel() {
	r.mu.Lock()
	s := r.s
	r.mu.Unlock()
	if s != nil {
		s.Reset(http2.ErrCodeCancel)
	}
}

// end records how the call ended, once.
func (r *rpcStream) end(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	stop := r.stop
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
	r.wake()
}

func (r *rpcStream) Head(_ *h2.Stream, fields []hpack.HeaderField, end bool) {
	md := metadata.MD{}
	httpStatus := ""
	for _, f := range fields {
		if f.Name == ":status" {
			httpStatus = f.Value
		} else if !strings.HasPrefix(f.Name, ":") {
			md.Append(f.Name, f.Value)
		}
	}
	r.mu.Lock()
	if httpStatus != "" {
		r.httpStatus = httpStatus
	}
	if r.header == nil && !end {
		r.header = md
		r.mu.Unlock()
		r.wake()
		return
	}
	r.trailer = md
	httpStatus = r.httpStatus
	r.mu.Unlock()
	if !end {
		return // a second head without END_STREAM: the peer's mistake, the end will tell
	}
	st := grpcwire.Status(fields, httpStatus)
	if st.Code() == codes.OK {
		r.end(io.EOF)
		return
	}
	r.end(st.Err())
}

func (r *rpcStream) Data(s *h2.Stream, data []byte, end bool) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	give, tooLarge := r.buf.Add(data)
	if tooLarge {
		r.mu.Unlock()
		s.Reset(http2.ErrCodeCancel)
		r.end(status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d)", grpcwire.MaxRespMsgSize))
		return
	}
	r.mu.Unlock()
	if give > 0 {
		s.Consumed(give)
	}
	if end {
		r.end(status.Error(codes.Internal, "the shard ended the response without trailers"))
		return
	}
	r.wake()
}

func (r *rpcStream) Closed(err error) {
	if cerr := r.ctx.Err(); cerr != nil {
		r.end(status.FromContextError(cerr).Err())
		return
	}
	var se http2.StreamError
	switch {
	case h2.Refused(err):
		r.end(status.Error(codes.Unavailable, "connection error: the shard refused the stream"))
	case errors.As(err, &se):
		deadline, _ := r.ctx.Deadline()
		r.end(status.Error(grpcwire.ResetCode(se.Code, deadline), fmt.Sprintf("stream reset: %v", se.Code)))
	default:
		r.end(status.Errorf(codes.Unavailable, "the connection to the shard ended: %v", err))
	}
}

// OpenError is a call that could not be sent, worded so that
// neverSent knows it.
func OpenError(shardID string, err error) error {
	if errors.Is(err, h2.ErrFull) {
		return status.Errorf(codes.Unavailable, "connection error: every connection to shard %s carries as many calls as the shard allows", shardID)
	}
	return status.Errorf(codes.Unavailable, "connection error: %v", err)
}
