package http1

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// response gathers what a handler writes; the connection sends it, with
// its length, when the handler returns. One per connection.
type response struct {
	c           *conn
	header      http.Header
	status      int
	wroteHeader bool
	head        bool // a HEAD request: no body goes out
	body        []byte
}

func (w *response) reset(head bool) {
	if w.header == nil {
		w.header = http.Header{}
	}
	clear(w.header)
	w.status, w.wroteHeader, w.head = http.StatusOK, false, head
	if cap(w.body) > 64<<10 {
		w.body = nil
	}
	w.body = w.body[:0]
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader || code < 200 { // informational answers are not sent
		return
	}
	w.status, w.wroteHeader = code, true
}

func (w *response) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified && status >= 200
}

// appendTo writes the answer onto b: status line, headers (its own
// Content-Length, Date and Connection), body.
func (w *response) appendTo(b []byte, minor int, keep bool) []byte {
	b = append(b, "HTTP/1."...)
	b = append(b, byte('0'+minor))
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(w.status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(w.status)...)
	b = append(b, "\r\n"...)
	for k, vs := range w.header {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Connection", "Date":
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = appendSafe(b, v)
			b = append(b, "\r\n"...)
		}
	}
	if _, ok := w.header["Content-Type"]; !ok && len(w.body) > 0 {
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(w.body)...)
		b = append(b, "\r\n"...)
	}
	if bodyAllowed(w.status) {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(w.body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Date: "...)
	b = append(b, httpDate()...)
	b = append(b, "\r\n"...)
	switch {
	case !keep:
		b = append(b, "Connection: close\r\n"...)
	case minor == 0:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	b = append(b, "\r\n"...)
	if !w.head {
		b = append(b, w.body...)
	}
	return b
}

// appendSafe appends a header value with any CR or LF turned into a
// space: a value cannot end the header early (response splitting).
func appendSafe(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		ch := v[i]
		if ch == '\r' || ch == '\n' {
			ch = ' '
		}
		b = append(b, ch)
	}
	return b
}

// The Date header changes once a second; formatting it per answer would
// cost more than the rest of the head.
var date atomic.Pointer[dateStamp]

type dateStamp struct {
	sec  int64
	text string
}

func httpDate() string {
	now := time.Now()
	if d := date.Load(); d != nil && d.sec == now.Unix() {
		return d.text
	}
	d := &dateStamp{sec: now.Unix(), text: now.UTC().Format(http.TimeFormat)}
	date.Store(d)
	return d.text
}

// ClientGone reports whether the client has closed the connection
// already, so that a handler holding something only this client can take
// (activated jobs) gives it back rather than write it into a dead socket.
// Under net/http the request's context tells the same; here that context
// only ends once the request is old enough to be watched (watchAfter).
func (w *response) ClientGone() bool {
	if w.c.r < w.c.w {
		return false // the next request is already here
	}
	return peerClosed(w.c.nc)
}
