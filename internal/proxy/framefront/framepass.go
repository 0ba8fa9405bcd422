package framefront

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"

	"github.com/shardctl/shardctl/internal/h2"
)

// passCall is a call the frame front hands to grpc-go's ServeHTTP: the
// request body is fed from the client's DATA frames, the response goes
// out as the handler writes it, waiting for the client's window.
type passCall struct {
	body   *bodyPipe
	cancel context.CancelFunc
}

// pass runs the stream's call in grpc-go, in a goroutine the front
// waits for when it stops.
func (f *Front) pass(fc *frontConn, s *h2.Stream, fields []hpack.HeaderField, head *requestHead, end bool) {
	ctx, cancel := context.WithCancel(f.p.Background())
	call := &passCall{body: newBodyPipe(), cancel: cancel}
	s.Value = call
	if end {
		call.body.close(nil)
	}
	r := &http.Request{
		Method:     head.method,
		URL:        &url.URL{Path: head.path},
		RequestURI: head.path,
		Proto:      "HTTP/2.0",
		ProtoMajor: 2,
		Header:     http.Header{},
		Host:       head.authority,
		RemoteAddr: s.Conn().RemoteAddr().String(),
		Body:       call.body,
	}
	for _, hf := range fields {
		if !strings.HasPrefix(hf.Name, ":") {
			r.Header.Add(hf.Name, hf.Value)
		}
	}
	if tc, ok := s.Conn().NetConn().(*tls.Conn); ok {
		st := tc.ConnectionState()
		r.TLS = &st
	}
	r = r.WithContext(ctx)
	w := &streamWriter{s: s, header: http.Header{}}
	if !fc.startHandler(s, func() {
		defer cancel()
		f.grpc.ServeHTTP(w, r)
		w.finish()
	}) {
		cancel()
	}
}

// streamWriter is an http.ResponseWriter on a stream of the front.
type streamWriter struct {
	s           *h2.Stream
	header      http.Header
	wroteHeader bool
	declared    []string // trailer names the head announced
	failed      error
}

func (w *streamWriter) Header() http.Header { return w.header }

func (w *streamWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	fields := []hpack.HeaderField{{Name: ":status", Value: strconv.Itoa(code)}}
	for k, vv := range w.header {
		lk := strings.ToLower(k)
		if lk == "trailer" {
			for _, v := range vv {
				for _, name := range strings.Split(v, ",") {
					if name = strings.TrimSpace(name); name != "" {
						w.declared = append(w.declared, name)
					}
				}
			}
			continue
		}
		if strings.HasPrefix(k, http.TrailerPrefix) || !httpguts.ValidHeaderFieldName(lk) {
			continue
		}
		for _, v := range vv {
			fields = append(fields, hpack.HeaderField{Name: lk, Value: v})
		}
	}
	if err := w.s.WriteHeaders(fields, false); err != nil {
		w.failed = err
	}
}

// Write queues a copy of b and waits until the client's window let it
// out: a client that reads slowly holds the handler, not the proxy's
// memory.
func (w *streamWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.failed != nil {
		return 0, w.failed
	}
	if len(b) == 0 {
		return 0, nil
	}
	if err := w.s.WriteData(append([]byte(nil), b...), false); err != nil {
		w.failed = err
		return 0, err
	}
	<-w.s.Drained()
	return len(b), nil
}

func (w *streamWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
}

// finish ends the stream: the trailers the head declared and those set
// with http.TrailerPrefix.
func (w *streamWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	var trailers []hpack.HeaderField
	for _, name := range w.declared {
		for _, v := range w.header.Values(name) {
			trailers = append(trailers, hpack.HeaderField{Name: strings.ToLower(name), Value: v})
		}
	}
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			for _, v := range vv {
				trailers = append(trailers, hpack.HeaderField{Name: strings.ToLower(name), Value: v})
			}
		}
	}
	if len(trailers) > 0 {
		_ = w.s.WriteHeaders(trailers, true)
		return
	}
	_ = w.s.WriteData(nil, true)
}

// bodyPipe is a request body fed by the connection's reader: writes
// never block (the handler reads one message, and the size is capped);
// reads wait for data.
type bodyPipe struct {
	mu     sync.Mutex
	buf    []byte
	total  int
	err    error // io.EOF once the client's side ended
	notify chan struct{}
}

func newBodyPipe() *bodyPipe { return &bodyPipe{notify: make(chan struct{}, 1)} }

var errBodyTooLarge = errors.New("the request body is larger than the largest message the proxy takes")

func (b *bodyPipe) write(p []byte, limit int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil
	}
	b.total += len(p)
	if b.total > limit {
		b.err = errBodyTooLarge
		b.signal()
		return b.err
	}
	b.buf = append(b.buf, p...)
	b.signal()
	return nil
}

func (b *bodyPipe) signal() {
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// close ends the body: err nil is the end of the request.
func (b *bodyPipe) close(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		if err == nil {
			err = io.EOF
		}
		b.err = err
	}
	b.signal()
}

func (b *bodyPipe) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		if len(b.buf) > 0 {
			n := copy(p, b.buf)
			b.buf = b.buf[n:]
			b.mu.Unlock()
			return n, nil
		}
		err := b.err
		b.mu.Unlock()
		if err != nil {
			return 0, err
		}
		<-b.notify
	}
}

// Close is the handler's: it reads no more.
func (b *bodyPipe) Close() error {
	b.close(errors.New("body closed by handler"))
	return nil
}
