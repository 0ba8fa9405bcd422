package http1

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// body is a request's body as it comes from the connection: what is
// buffered first, then reads straight from the socket. One per
// connection, reset for each request.
type body struct {
	c *conn

	mu        sync.Mutex // the watcher asks whether the body is read
	chunked   bool
	remaining int64 // of the current chunk or the Content-Length
	done      bool  // read to its end
	failed    error
	cont      bool // Expect: 100-continue, not answered yet
	closed    bool // the handler closed it
}

var errBodyClosed = errors.New("http1: read on a closed request body")

// reset reads the framing of req's body from its headers.
func (b *body) reset(req *http.Request) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.chunked, b.remaining, b.done, b.failed, b.cont, b.closed = false, 0, false, nil, false, false
	h := req.Header
	te, cl := h["Transfer-Encoding"], h["Content-Length"]
	switch {
	case len(te) > 0 && len(cl) > 0:
		// Both: the framing a smuggled request relies on (RFC 9112 6.3).
		return &headError{http.StatusBadRequest, "both Transfer-Encoding and Content-Length"}
	case len(te) > 0:
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
			return &headError{http.StatusNotImplemented, "unsupported Transfer-Encoding " + strconv.Quote(strings.Join(te, ","))}
		}
		b.chunked = true
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
		delete(h, "Transfer-Encoding")
	case len(cl) > 0:
		n, err := strconv.ParseInt(strings.TrimSpace(cl[0]), 10, 64)
		for _, v := range cl[1:] {
			if strings.TrimSpace(v) != strings.TrimSpace(cl[0]) {
				err = errors.New("differing")
			}
		}
		if err != nil || n < 0 {
			return &headError{http.StatusBadRequest, "malformed Content-Length"}
		}
		b.remaining = n
		req.ContentLength = n
	}
	if req.ContentLength == 0 && !b.chunked {
		b.done = true
		req.ContentLength = 0
	}
	if !b.done && strings.EqualFold(h.Get("Expect"), "100-continue") && req.ProtoMinor == 1 {
		b.cont = true
	}
	return nil
}

// consumed reports whether the handler has read the body to its end (or
// there is none).
func (b *body) consumed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done || b.failed != nil
}

func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	closed, done, failed := b.closed, b.done, b.failed
	b.mu.Unlock()
	switch {
	case closed:
		return 0, errBodyClosed
	case failed != nil:
		return 0, failed
	case done:
		return 0, io.EOF
	}
	n, err := b.read(p)
	if err != nil {
		b.mu.Lock()
		if errors.Is(err, io.EOF) {
			b.done = true
		} else {
			b.failed = err
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *body) read(p []byte) (int, error) {
	c := b.c
	if b.cont {
		b.cont = false
		if err := c.write([]byte("HTTP/1.1 100 Continue\r\n\r\n")); err != nil {
			return 0, err
		}
	}
	if b.chunked {
		return b.readChunked(p)
	}
	if b.remaining == 0 {
		return 0, io.EOF
	}
	n, err := c.readInto(p[:min(int64(len(p)), b.remaining)])
	b.remaining -= int64(n)
	if err != nil && errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // the client sent less than it announced
	}
	if b.remaining == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

// readInto copies buffered bytes into p, or reads from the socket into p
// when nothing is buffered.
func (c *conn) readInto(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.r < c.w {
		n := copy(p, c.buf[c.r:c.w])
		c.r += n
		return n, nil
	}
	return c.read(p)
}

// readChunked decodes a chunked body (RFC 9112 7.1): size lines,
// data, and a trailer section that is read and dropped.
func (b *body) readChunked(p []byte) (int, error) {
	c := b.c
	if b.remaining == 0 {
		line, err := c.readLine()
		if err != nil {
			return 0, err
		}
		size, _, _ := bytes.Cut(line, []byte(";")) // extensions are ignored
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		if err != nil || n < 0 {
			return 0, errors.New("http1: malformed chunk size")
		}
		if n == 0 {
			for { // trailers, up to the empty line
				l, err := c.readLine()
				if err != nil {
					return 0, err
				}
				if len(l) == 0 {
					return 0, io.EOF
				}
			}
		}
		b.remaining = n
	}
	n, err := c.readInto(p[:min(int64(len(p)), b.remaining)])
	b.remaining -= int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return n, err
	}
	if b.remaining == 0 {
		if l, err := c.readLine(); err != nil || len(l) != 0 {
			return n, errors.New("http1: malformed chunk end")
		}
	}
	return n, nil
}

// maxLine bounds a chunk size or trailer line.
const maxLine = 4096

// readLine reads one CRLF-ended line from the connection, without it.
func (c *conn) readLine() ([]byte, error) {
	for {
		if i := bytes.Index(c.buf[c.r:c.w], crlf); i >= 0 {
			line := c.buf[c.r : c.r+i]
			c.r += i + 2
			return line, nil
		}
		if c.w-c.r > maxLine {
			return nil, errors.New("http1: line too long in a chunked body")
		}
		if err := c.fill(); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// finish reads what the handler left of the body, up to drainLimit, and
// reports whether the connection can carry the next request.
func (b *body) finish() bool {
	b.mu.Lock()
	done, failed, cont := b.done, b.failed, b.cont
	b.closed = false // the server's own read
	b.mu.Unlock()
	if failed != nil {
		return false
	}
	if done {
		return true
	}
	if cont {
		// The client waits for 100 Continue before it sends: it was never
		// asked for, so there is nothing to drain (RFC 9110 10.1.1).
		return false
	}
	n, err := io.Copy(io.Discard, io.LimitReader(b, drainLimit+1))
	return n <= drainLimit && (err == nil || errors.Is(err, io.EOF)) && b.consumed()
}
