package framefront

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/h2"
	"github.com/shardctl/shardctl/internal/proxy/grpcfront"
	"github.com/shardctl/shardctl/internal/proxy/grpcwire"
	"github.com/shardctl/shardctl/internal/restgateway"
)

// fastMethod is a gateway RPC the frame front forwards itself.
type fastMethod struct {
	rpc     string
	path    string // its :path
	in, out protoreflect.MessageDescriptor
	// key is the field whose key routes the call; with place, a call
	// without it is placed as something new.
	key   protowire.Number
	place bool
	// create: CreateProcessInstance, whose definition key the ledger may
	// turn into a process id and version.
	create bool
	// started is the answer's field that lists the instances a call
	// started (EvaluateConditional's), each counted as placed.
	started protowire.Number
}

const gatewayService = "gateway_protocol.Gateway"

// fastMethods by :path. Each takes one request and answers one response
// on one shard; calls that fan out, stream or long-poll are not here.
var fastMethods = func() map[string]*fastMethod {
	svc := pb.File_gatewaypb_gateway_proto.Services().ByName("Gateway")
	out := map[string]*fastMethod{}
	add := func(rpc, key string, place bool) {
		md := svc.Methods().ByName(protoreflect.Name(rpc))
		m := &fastMethod{rpc: rpc, path: "/" + gatewayService + "/" + rpc, in: md.Input(), out: md.Output(), place: place}
		if key != "" {
			m.key = md.Input().Fields().ByName(protoreflect.Name(key)).Number()
		}
		out[m.path] = m
	}
	add("CreateProcessInstance", "processDefinitionKey", true)
	out["/"+gatewayService+"/CreateProcessInstance"].create = true
	add("EvaluateDecision", "decisionKey", true)
	add("EvaluateConditional", "processDefinitionKey", true)
	cond := out["/"+gatewayService+"/EvaluateConditional"]
	cond.started = cond.out.Fields().ByName("processInstances").Number()
	for rpc, key := range map[string]string{
		"CancelProcessInstance":  "processInstanceKey",
		"CompleteJob":            "jobKey",
		"FailJob":                "jobKey",
		"ThrowError":             "jobKey",
		"UpdateJobRetries":       "jobKey",
		"UpdateJobTimeout":       "jobKey",
		"SetVariables":           "elementInstanceKey",
		"ResolveIncident":        "incidentKey",
		"ModifyProcessInstance":  "processInstanceKey",
		"MigrateProcessInstance": "processInstanceKey",
		"DeleteResource":         "resourceKey",
	} {
		add(rpc, key, false)
	}
	return out
}()

// Front serves clients for a proxy with --front=frames.
type Front struct {
	p *grpcfront.Server
	// grpc serves what the front hands on as HTTP/2 requests (grpc-go's
	// ServeHTTP).
	grpc http.Handler
	ln   net.Listener
	tls  *tls.Config

	cooling cooldowns // client addresses cut off lately
	tarpit  tarpit    // their new connections, held a moment

	mu      sync.Mutex
	conns   map[*h2.Conn]struct{}
	closing bool
	// handlers are the calls run in goroutines of their own: by the proxy's
	// handlers (localCall) or handed to grpc-go (passCall).
	handlers sync.WaitGroup
	accepted sync.WaitGroup
}

func New(p *grpcfront.Server, grpc http.Handler, ln net.Listener, tc *tls.Config) *Front {
	f := &Front{p: p, grpc: grpc, ln: ln, conns: map[*h2.Conn]struct{}{}}
	if tc != nil {
		f.tls = tc.Clone()
		f.tls.NextProtos = []string{http2.NextProtoTLS}
	}
	return f
}

// Serve accepts clients until the listener closes. An accept that
// fails (out of file descriptors, most often) is retried after a
// back-off, doubling from 5 ms to 1 s, as net/http and grpc-go do: the
// clients already served go on, and new ones are taken once descriptors
// free up. A connection past the cap is told so and closed.
func (f *Front) Serve() error {
	limits, m, log := f.p.Config().Clients, f.p.Metrics(), f.p.Logger()
	cfg := h2.Config{HandshakeTimeout: positive(limits.HandshakeTimeout), IdleTimeout: positive(limits.IdleTimeout),
		KeepAlive: positive(limits.KeepAlive), ResetBudget: max(limits.ResetBudget, 0),
		BacklogLimit: max(limits.OutputLimit, 0), Backlogged: func() { m.ClientsCutOff.WithLabelValues(cutOutput).Inc() }}
	var backoff time.Duration
	for {
		nc, err := f.ln.Accept()
		if err != nil {
			f.mu.Lock()
			closing := f.closing
			f.mu.Unlock()
			if closing || errors.Is(err, net.ErrClosed) {
				return nil
			}
			m.AcceptErrors.Inc()
			if backoff == 0 {
				log.Warn("accepting client connections failed: backing off, the connections served go on", "err", err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			time.Sleep(backoff)
			continue
		}
		if backoff > 0 {
			log.Info("accepting client connections again")
			backoff = 0
		}
		src := remoteAddr(nc)
		if limits.Cooldown > 0 && src.IsValid() && f.cooling.holds(src, time.Now()) {
			m.ClientsCutOff.WithLabelValues(cutCooldown).Inc()
			if !f.tarpit.hold(nc) {
				nc.Close()
			}
			continue
		}
		if tcp, ok := nc.(*net.TCPConn); ok {
			_ = tcp.SetNoDelay(true)
		}
		if f.tls != nil {
			nc = tls.Server(nc, f.tls)
		}
		f.mu.Lock()
		if f.closing {
			f.mu.Unlock()
			nc.Close()
			return nil
		}
		if limits.MaxConns > 0 && len(f.conns) >= limits.MaxConns {
			f.accepted.Add(1)
			f.mu.Unlock()
			m.ClientsCutOff.WithLabelValues(cutConns).Inc()
			go func() {
				defer f.accepted.Done()
				h2.Refuse(nc, http2.ErrCodeEnhanceYourCalm, fmt.Sprintf("the proxy serves its limit of %d client connections", limits.MaxConns))
			}()
			continue
		}
		ccfg := cfg
		ccfg.CutOff = func(why h2.CutOff) {
			m.ClientsCutOff.WithLabelValues(string(why)).Inc()
			if limits.Cooldown > 0 && src.IsValid() {
				f.cooling.start(src, time.Now(), limits.Cooldown)
			}
		}
		c := h2.Server(nc, ccfg, &frontConn{f: f})
		f.conns[c] = struct{}{}
		f.accepted.Add(1)
		f.mu.Unlock()
		m.ClientConns.Inc()
		go func() {
			defer f.accepted.Done()
			<-c.Done()
			f.mu.Lock()
			delete(f.conns, c)
			f.mu.Unlock()
			m.ClientConns.Dec()
		}()
	}
}

// Reasons a connection is counted under when it is refused: past
// --max-client-connections, or from an address cooling down.
const (
	cutConns    = "connections"
	cutCooldown = "cooldown"
	cutOutput   = "output" // calls refused (h2's Backlogged)
)

// positive is d, or 0 (none) for a limit turned off.
func positive(d time.Duration) time.Duration { return max(d, 0) }

// Shutdown stops accepting, sends every client GOAWAY and waits until
// their calls are done, or ctx ends (then every connection is cut).
func (f *Front) Shutdown(ctx context.Context) {
	f.mu.Lock()
	f.closing = true
	conns := make([]*h2.Conn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	_ = f.ln.Close()
	f.tarpit.Close()
	for _, c := range conns {
		c.GoAway()
	}
	done := make(chan struct{})
	go func() { f.accepted.Wait(); f.handlers.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	f.mu.Lock()
	conns = conns[:0]
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	<-done
}

// frontConn hears one client connection.
type frontConn struct {
	f *Front
	// running counts the handlers running in goroutines of their own for
	// this connection, those of streams the client reset included: a
	// reset ends the stream at once, its handler only when it notices.
	running atomic.Int32
	// ended are the calls whose request ended in the read under way; they
	// start when the reader has handled all it brought (BatchEnded), so
	// one the same read reset never starts. The reader's alone.
	ended []startable
}

// startable is a call that starts once its request has ended; one whose
// client reset it first does not.
type startable interface{ requestEnded() }

var _ h2.BatchEnder = (*frontConn)(nil)

// BatchEnded starts the calls whose request ended in the read.
func (fc *frontConn) BatchEnded() {
	for i, c := range fc.ended {
		c.requestEnded()
		fc.ended[i] = nil
	}
	fc.ended = fc.ended[:0]
}

// maxHandlers is the most handlers a connection may have running, as
// many as the streams it may open (h2's default): a stream past it is
// refused (REFUSED_STREAM, safe to retry) rather than started. Go's
// HTTP/2 server holds its handlers to the same number since the
// rapid-reset attack.
const maxHandlers = 1000

// startHandler runs handler in a goroutine the front waits for, unless
// the connection has maxHandlers running: then the stream is refused,
// and startHandler says so (false).
func (fc *frontConn) startHandler(s *h2.Stream, handler func()) bool {
	if fc.running.Add(1) > maxHandlers {
		fc.running.Add(-1)
		fc.f.p.Metrics().ClientsCutOff.WithLabelValues(cutHandlers).Inc()
		s.Reset(http2.ErrCodeRefusedStream)
		return false
	}
	fc.f.handlers.Go(func() {
		defer fc.running.Add(-1)
		handler()
	})
	return true
}

// cutHandlers is the reason a stream refused for maxHandlers is counted
// under.
const cutHandlers = "handlers"

func (fc *frontConn) Headers(s *h2.Stream, fields []hpack.HeaderField, end, truncated bool) {
	switch v := s.Value.(type) {
	case nil:
		fc.open(s, fields, end, truncated)
	case startable: // trailers end the request
		fc.ended = append(fc.ended, v)
	case *passCall:
		v.body.close(nil)
	}
}

func (fc *frontConn) Data(s *h2.Stream, data []byte, end bool) {
	switch v := s.Value.(type) {
	case *fastCall:
		v.received(data)
	case *localCall:
		v.received(data)
	case *jobCall:
		v.received(data)
	case *passCall:
		if err := v.body.write(data, maxRecv); err != nil {
			s.Reset(http2.ErrCodeCancel)
			return
		}
		if end {
			v.body.close(nil)
		}
		return
	}
	if end {
		if c, ok := s.Value.(startable); ok {
			fc.ended = append(fc.ended, c)
		}
	}
}

func (fc *frontConn) Closed(s *h2.Stream, err error) {
	switch v := s.Value.(type) {
	case *fastCall:
		v.clientGone()
	case *localCall:
		v.clientGone()
	case *jobCall:
		v.clientGone()
	case *passCall:
		v.cancel()
		v.body.close(err)
	}
}

// open starts a call in a plain gRPC request: forwarded as frames when
// it is one of fastMethods, else run by the proxy's own handlers; what
// is not a plain gRPC request for the gateway goes to grpc-go, which
// answers it as it would.
func (fc *frontConn) open(s *h2.Stream, fields []hpack.HeaderField, end, truncated bool) {
	var req requestHead
	if err := req.parse(fields); err != nil || truncated {
		// Too big or not valid: grpc-go would not serve it either.
		s.Reset(http2.ErrCodeProtocol)
		return
	}
	if m := fastMethods[req.path]; m != nil && req.fast() {
		call := newFastCall(fc.f.p, s, m, &req)
		s.Value = call
		if end {
			fc.ended = append(fc.ended, call)
		}
		return
	}
	if req.path == activateJobsPath && req.fast() {
		jc := fc.f.newJobCall(fc, s, &req, fields)
		s.Value = jc
		if end {
			fc.ended = append(fc.ended, jc)
		}
		return
	}
	if m := localMethods[req.path]; m != nil && req.fast() {
		fc.f.local(fc, s, m, &req, fields, end)
		return
	}
	fc.f.pass(fc, s, fields, &req, end)
}

// requestHead is what the front reads from a request's header block.
type requestHead struct {
	method, path, authority, scheme string
	contentType, encoding, auth     string
	tenant                          string // 8.10's physical tenant
	timeout                         time.Duration
	hasTimeout                      bool
}

func (r *requestHead) parse(fields []hpack.HeaderField) error {
	for _, f := range fields {
		switch f.Name {
		case ":method":
			r.method = f.Value
		case ":path":
			r.path = f.Value
		case ":authority":
			r.authority = f.Value
		case ":scheme":
			r.scheme = f.Value
		case "content-type":
			r.contentType = f.Value
		case "grpc-encoding":
			r.encoding = f.Value
		case "authorization":
			r.auth = f.Value
		case restgateway.PhysicalTenantMD:
			r.tenant = f.Value
		case "grpc-timeout":
			d, err := grpcwire.ParseTimeout(f.Value)
			if err != nil {
				return err
			}
			r.timeout, r.hasTimeout = d, true
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return fmt.Errorf("connection-specific header %q", f.Name)
		case "te":
			if f.Value != "trailers" {
				return fmt.Errorf("te %q", f.Value)
			}
		}
	}
	if r.method == "" || r.path == "" || r.scheme == "" {
		return errors.New("a request needs :method, :scheme and :path")
	}
	return nil
}

// fast: a plain gRPC request the front can forward itself. Anything
// else (compressed, another content type) is grpc-go's to answer.
func (r *requestHead) fast() bool {
	return r.method == "POST" && (r.contentType == "application/grpc" || r.contentType == "application/grpc+proto") &&
		(r.encoding == "" || r.encoding == "identity")
}
