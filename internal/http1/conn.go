package http1

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardctl/shardctl/internal/rawsock"
)

// watchAfter is how long a handler runs before the connection is watched
// for the client going away (its request context then ends). Most calls
// answer sooner, and watching costs a goroutine and a read.
const watchAfter = 50 * time.Millisecond

// drainLimit is the most of a request body a handler left unread that is
// read and dropped to keep the connection; past it the connection closes.
const drainLimit = 256 << 10

type conn struct {
	srv    *Server
	nc     net.Conn
	sock   *rawsock.Socket // nc's descriptor, when it is a plain TCP connection on Linux
	remote string
	tls    *tls.ConnectionState
	ctx    context.Context
	cancel context.CancelFunc

	buf  []byte // buf[r:w] is read and not consumed
	r, w int

	mu        sync.Mutex
	active    bool // inside a request or its answer not sent (false: waiting for one)
	answering bool // in rawsock.Answer: sending an answer, then waiting for the next request
	closing   bool // the server stops: close after this answer

	header http.Header // reused: handlers do not keep a request's
	resp   response
	body   body
	out    []byte // the answer as it goes on the wire
	// The answer of a kept connection is sent by the read of the next
	// request (rawsock.Answer): pending says it is not sent yet.
	pending bool
	// drained: the last read took fewer bytes than it had room for, so
	// the socket was empty after it.
	drained  bool
	deadline time.Time // the read deadline readHead set

	watch struct {
		timer   *time.Timer
		mu      sync.Mutex
		running bool
		done    chan struct{}
		got     []byte // what the watcher read: the next request's start
		cancel  context.CancelFunc
	}
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc, remote: nc.RemoteAddr().String(), buf: make([]byte, 4096), header: http.Header{}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.sock = rawsock.New(nc)
	c.resp.c = c
	c.body.c = c
	c.watch.timer = time.AfterFunc(time.Hour, c.startWatch)
	c.watch.timer.Stop()
	return c
}

// closeIfIdle closes a connection waiting for a request; one inside a
// request closes after its answer.
func (c *conn) closeIfIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closing = true
	switch {
	case c.answering:
		// Answer sends the answer even past its deadline, and then ends.
		_ = c.nc.SetReadDeadline(rawsock.Expired)
	case !c.active:
		_ = c.nc.Close()
	}
}

func (c *conn) abort() {
	c.cancel()
	_ = c.nc.Close()
}

func (c *conn) setActive(a bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active = a
	return c.closing
}

func (c *conn) serve() {
	defer c.cancel()
	defer c.watch.timer.Stop()
	defer func() {
		_ = c.flush()
		_ = c.nc.Close()
		if c.sock != nil {
			c.sock.Stop()
		}
	}()
	if tc, ok := c.nc.(*tls.Conn); ok {
		_ = tc.SetDeadline(time.Now().Add(c.srv.ReadHeaderTimeout))
		if err := tc.HandshakeContext(c.ctx); err != nil {
			return
		}
		_ = tc.SetDeadline(time.Time{})
		st := tc.ConnectionState()
		c.tls = &st
	}
	for {
		head, err := c.readHead()
		if err != nil {
			var he *headError
			if errors.As(err, &he) {
				c.writeError(he.status, he.msg)
			}
			return
		}
		if closing := c.setActive(true); closing {
			return
		}
		// A Shutdown under way marked the connection closing: it ends
		// here, and Serve's goroutine tells Shutdown (forget).
		keep := c.handle(head)
		if c.pending {
			continue // the read of the next request sends the answer, and the connection is idle from there
		}
		if closing := c.setActive(false); closing || !keep {
			return
		}
	}
}

// headError is a request the server answers itself and then closes on.
type headError struct {
	status int
	msg    string
}

func (e *headError) Error() string { return e.msg }

// readHead reads up to the end of a request head and returns it (without
// the final CRLF CRLF), consumed from the buffer.
func (c *conn) readHead() ([]byte, error) {
	waiting := c.r == c.w // nothing of the next request yet: idle
	if waiting {
		c.setReadDeadline(time.Now().Add(c.srv.IdleTimeout))
	} else {
		c.setReadDeadline(time.Now().Add(c.srv.ReadHeaderTimeout))
		// The next request is here already: the answer goes first.
		if err := c.flush(); err != nil {
			return nil, err
		}
	}
	searched := 0
	for {
		// Empty lines before a request line are ignored (RFC 9112 2.2).
		for c.w-c.r >= 2 && c.buf[c.r] == '\r' && c.buf[c.r+1] == '\n' {
			c.r += 2
		}
		if i := bytes.Index(c.buf[c.r+searched:c.w], crlfcrlf); i >= 0 {
			end := c.r + searched + i
			if end-c.r > c.srv.MaxHeaderBytes {
				return nil, &headError{http.StatusRequestHeaderFieldsTooLarge, "request head over " + strconv.Itoa(c.srv.MaxHeaderBytes) + " bytes"}
			}
			head := c.buf[c.r:end]
			c.r = end + 4
			return head, nil
		}
		searched = max(c.w-c.r-3, 0)
		if c.w-c.r >= c.srv.MaxHeaderBytes {
			return nil, &headError{http.StatusRequestHeaderFieldsTooLarge, "request head over " + strconv.Itoa(c.srv.MaxHeaderBytes) + " bytes"}
		}
		if err := c.fill(); err != nil {
			if c.w > c.r && !errors.Is(err, io.EOF) {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return nil, &headError{http.StatusRequestTimeout, "request head not received in time"}
				}
			}
			return nil, err
		}
		if waiting {
			waiting = false
			c.setReadDeadline(time.Now().Add(c.srv.ReadHeaderTimeout))
		}
	}
}

var crlfcrlf = []byte("\r\n\r\n")

// read and write go through the raw socket when there is one: a read
// or write through net.Conn costs the scheduler more than the proxy's
// own work on a small call (see rawsock). Deadlines set on nc hold for
// both.
func (c *conn) read(p []byte) (int, error) {
	if c.sock == nil {
		return c.nc.Read(p)
	}
	var n int
	var err error
	if c.pending {
		c.mu.Lock()
		closing := c.closing
		c.active, c.answering = false, !closing
		c.mu.Unlock()
		if closing {
			if err := c.flush(); err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
		c.pending = false
		var kicked bool
		n, kicked, err = c.sock.Answer(c.out, p, c.drained)
		c.mu.Lock()
		c.answering = false
		if kicked && !c.closing {
			_ = c.nc.SetReadDeadline(c.deadline)
		}
		c.mu.Unlock()
		c.keepOut()
	} else {
		n, err = c.sock.Read(p)
	}
	c.drained = n > 0 && n < len(p)
	return n, err
}

func (c *conn) setReadDeadline(t time.Time) {
	c.deadline = t
	_ = c.nc.SetReadDeadline(t)
}

// flush sends the answer still pending.
func (c *conn) flush() error {
	if !c.pending {
		return nil
	}
	c.pending = false
	err := c.write(c.out)
	c.keepOut()
	return err
}

// keepOut keeps the answer's buffer for the next, unless it grew large:
// a large answer's buffer is not kept for the next small one.
func (c *conn) keepOut() {
	if cap(c.out) > 64<<10 {
		c.out = nil
	}
}

func (c *conn) write(p []byte) error {
	if c.sock != nil {
		return c.sock.Write(p, nil)
	}
	_, err := c.nc.Write(p)
	return err
}

// fill reads more into the buffer, moving what is unread to its start
// and growing it when full.
func (c *conn) fill() error {
	if c.r > 0 && c.r == c.w {
		c.r, c.w = 0, 0
	}
	if c.w == len(c.buf) {
		if c.r > 0 {
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		} else {
			grown := make([]byte, 2*len(c.buf))
			copy(grown, c.buf[:c.w])
			c.buf = grown
		}
	}
	n, err := c.read(c.buf[c.w:])
	c.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// handle parses one request head, runs the handler and answers; it
// reports whether the connection stays open.
func (c *conn) handle(head []byte) (keep bool) {
	req, err := c.parse(head)
	if err != nil {
		var he *headError
		if errors.As(err, &he) {
			c.writeError(he.status, he.msg)
		}
		return false
	}
	keep = wantsKeepAlive(req)
	// The request's context is the connection's: a client gone during a
	// request is gone for the connection too.
	c.watch.mu.Lock()
	c.watch.cancel = c.cancel
	c.watch.mu.Unlock()
	c.resp.reset(req.Method == http.MethodHead)
	c.watch.timer.Reset(watchAfter)
	panicked := c.run(req)
	c.stopWatch()
	if panicked {
		c.writeError(http.StatusInternalServerError, "internal error")
		return false
	}
	// What the handler left of the body is read and dropped, up to a
	// point: past it the connection is not worth keeping.
	if !c.body.finish() {
		keep = false
	}
	c.mu.Lock()
	closing := c.closing
	c.mu.Unlock()
	if closing || c.ctx.Err() != nil {
		keep = false
	}
	c.out = c.resp.appendTo(c.out[:0], req.ProtoMinor, keep)
	if keep && c.sock != nil {
		c.pending = true // sent by the next request's read
		return true
	}
	err = c.write(c.out)
	c.keepOut()
	return err == nil && keep
}

func (c *conn) run(req *http.Request) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panicked = true
				return
			}
			c.srv.Logger.Error("HTTP handler panic", "method", req.Method, "path", req.URL.Path, "panic", v)
			panicked = true
		}
	}()
	c.srv.Handler.ServeHTTP(&c.resp, req)
	return false
}

func wantsKeepAlive(req *http.Request) bool {
	conn := req.Header.Get("Connection")
	if req.ProtoMinor == 0 {
		return strings.EqualFold(conn, "keep-alive")
	}
	return !strings.EqualFold(conn, "close")
}

// parse reads a request head into a request whose body reads from the
// connection.
func (c *conn) parse(head []byte) (*http.Request, error) {
	line, rest, _ := bytes.Cut(head, crlf)
	method, line, ok1 := bytes.Cut(line, sp)
	target, proto, ok2 := bytes.Cut(line, sp)
	if !ok1 || !ok2 || len(method) == 0 || !isToken(method) || len(target) == 0 {
		return nil, &headError{http.StatusBadRequest, "malformed request line"}
	}
	var minor int
	switch string(proto) {
	case "HTTP/1.1":
		minor = 1
	case "HTTP/1.0":
		minor = 0
	default:
		return nil, &headError{http.StatusHTTPVersionNotSupported, "unsupported protocol " + strconv.Quote(string(proto))}
	}
	uri := string(target)
	u, err := url.ParseRequestURI(uri)
	if err != nil {
		return nil, &headError{http.StatusBadRequest, "malformed request target"}
	}
	h := c.header
	clear(h)
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, crlf)
		if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
			return nil, &headError{http.StatusBadRequest, "obsolete line folding in a header"}
		}
		name, value, ok := bytes.Cut(l, colon)
		if !ok || len(name) == 0 || !isToken(name) {
			return nil, &headError{http.StatusBadRequest, "malformed header line"}
		}
		key := canonical(name)
		h[key] = append(h[key], string(bytes.Trim(value, " \t")))
	}
	// Built on the stack and copied once, with its context.
	r := http.Request{Method: internMethod(method), URL: u, Proto: string(proto), ProtoMajor: 1, ProtoMinor: minor,
		Header: h, Host: u.Host, RemoteAddr: c.remote, RequestURI: uri, TLS: c.tls}
	req := r.WithContext(c.ctx)
	if req.Host == "" {
		req.Host = h.Get("Host")
	}
	if minor == 1 && len(h["Host"]) != 1 {
		return nil, &headError{http.StatusBadRequest, "want one Host header"}
	}
	if err := c.body.reset(req); err != nil {
		return nil, err
	}
	req.Body = &c.body
	return req, nil
}

var (
	crlf  = []byte("\r\n")
	sp    = []byte(" ")
	colon = []byte(":")
)

// canonical is the header key net/http would give name; the ones REST
// clients send are interned.
func canonical(name []byte) string {
	for _, k := range commonHeaders {
		if len(k) == len(name) && strings.EqualFold(k, string(name)) {
			return k
		}
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

var commonHeaders = []string{"Host", "Content-Type", "Content-Length", "Accept", "Accept-Encoding", "Accept-Language",
	"Authorization", "Connection", "User-Agent", "Transfer-Encoding", "Expect", "Sec-Fetch-Mode"}

// methods are the request methods interned: a request's method is then
// no allocation.
var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead}

func internMethod(m []byte) string {
	for _, known := range methods {
		if string(m) == known {
			return known
		}
	}
	return string(m)
}

// isToken reports whether b is an RFC 9110 token.
func isToken(b []byte) bool {
	for _, ch := range b {
		if ch <= ' ' || ch >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, ch) >= 0 {
			return false
		}
	}
	return true
}

// writeError answers a request the handler never saw; the connection
// closes after it.
func (c *conn) writeError(status int, msg string) {
	body := msg + "\n"
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c.nc, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nDate: %s\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), httpDate(), body)
}

// startWatch runs once a handler took watchAfter: a read on the
// connection tells whether the client went away (the request context
// then ends). It waits until the handler has read the body, which the
// watcher must not take.
func (c *conn) startWatch() {
	c.watch.mu.Lock()
	defer c.watch.mu.Unlock()
	if c.watch.running || c.watch.cancel == nil || !c.body.consumed() {
		if !c.body.consumed() && c.watch.cancel != nil {
			c.watch.timer.Reset(watchAfter) // look again later
		}
		return
	}
	c.watch.running = true
	c.watch.done = make(chan struct{})
	cancel, done := c.watch.cancel, c.watch.done
	// Cleared here, under the lock, not in the goroutine: stopWatch sets
	// a deadline in the past to end the read, and the goroutine must not
	// clear that one if it starts late.
	_ = c.nc.SetReadDeadline(time.Time{})
	go func() {
		defer close(done)
		var b [512]byte
		n, err := c.nc.Read(b[:])
		c.watch.got = append(c.watch.got[:0], b[:n]...)
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			cancel() // gone
		}
	}()
}

// stopWatch ends the watcher of the request just handled and keeps what
// it read for the next request.
func (c *conn) stopWatch() {
	c.watch.timer.Stop()
	c.watch.mu.Lock()
	running, done := c.watch.running, c.watch.done
	c.watch.cancel = nil
	c.watch.running = false
	c.watch.mu.Unlock()
	if !running {
		return
	}
	_ = c.nc.SetReadDeadline(rawsock.Expired)
	<-done
	_ = c.nc.SetReadDeadline(time.Time{})
	if len(c.watch.got) > 0 {
		if c.r > 0 && c.r == c.w {
			c.r, c.w = 0, 0
		}
		for len(c.buf)-c.w < len(c.watch.got) {
			grown := make([]byte, 2*len(c.buf))
			copy(grown, c.buf[:c.w])
			c.buf = grown
		}
		c.w += copy(c.buf[c.w:], c.watch.got)
		c.watch.got = c.watch.got[:0]
	}
}
