package h2

import (
	"fmt"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Stream is one HTTP/2 stream. Its fields are the connection's, under
// its lock; Value is the user's, set before the stream is shared.
type Stream struct {
	c  *Conn
	id uint32
	// Value is what the user keeps with the stream.
	Value any

	// send side
	window    int64 // what this side may still send on the stream
	pending   []byte
	endQueued bool                // END_STREAM after pending (or trailers)
	trailers  []hpack.HeaderField // sent after pending, with END_STREAM
	sentEnd   bool                // this side's half is closed
	isBlocked bool                // in c.blocked
	drained   chan struct{}       // made on demand: pending went empty

	// receive side
	recvWindow  int64
	recvUnacked int64
	// paced: the window is given back as the user calls Consumed, not
	// as the handler receives data (OpenPaced).
	paced bool
	// wantLen is the request's content-length (-1: none); gotLen what
	// its DATA carried so far.
	wantLen, gotLen int64
	peerEnded       bool
	closed          bool
	// dropped is how much of pending was never sent when the stream
	// ended.
	dropped int
}

// ID is the stream's id.
func (s *Stream) ID() uint32 { return s.id }

// Conn is the connection the stream is on.
func (s *Stream) Conn() *Conn { return s.c }

func (c *Conn) newStreamLocked(id uint32) *Stream {
	s := &Stream{c: c, id: id, window: int64(c.peerInitWindow), recvWindow: int64(c.cfg.StreamWindow), wantLen: -1}
	c.streams[id] = s
	c.streamEvents++
	return s
}

// Open starts a stream on a client connection with a request head.
func (c *Conn) Open(fields []hpack.HeaderField, end bool, value any) (*Stream, error) {
	c.mu.Lock()
	s, err := c.openLocked(fields, end, value)
	c.mu.Unlock()
	if err == nil {
		c.flush()
	}
	return s, err
}

// Request starts a stream with a whole request, head and body, which
// the writer sends in one go. paced: the answer's data is kept by the
// user until read, so the stream's window is given back only as
// Consumed says; a reader that falls behind stops the peer at one
// window rather than make the handler keep all it sends.
func (c *Conn) Request(fields []hpack.HeaderField, body []byte, value any, paced bool) (*Stream, error) {
	s, err := c.request(fields, body, value, paced)
	if err == nil {
		c.flush()
	}
	return s, err
}

// RequestShared is Request for calls that many goroutines start at once
// outside any reader's batch: their writes are shared (flushShared).
func (c *Conn) RequestShared(fields []hpack.HeaderField, body []byte, value any, paced bool) (*Stream, error) {
	s, err := c.request(fields, body, value, paced)
	if err == nil {
		c.flushShared()
	}
	return s, err
}

func (c *Conn) request(fields []hpack.HeaderField, body []byte, value any, paced bool) (*Stream, error) {
	c.mu.Lock()
	s, err := c.openLocked(fields, len(body) == 0, value)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	s.paced = paced
	if len(body) > 0 {
		c.queueLocked(s, body)
		s.endQueued = true
		c.sendPendingLocked(s)
	}
	c.mu.Unlock()
	return s, nil
}

func (c *Conn) openLocked(fields []hpack.HeaderField, end bool, value any) (*Stream, error) {
	if c.server {
		return nil, fmt.Errorf("h2: a server does not open streams")
	}
	if c.closed || c.goingAway || c.nextID > maxStreamID {
		return nil, ErrClosed
	}
	if uint32(len(c.streams)) >= c.peerMaxStreams {
		return nil, ErrFull
	}
	s := c.newStreamLocked(c.nextID)
	s.Value = value
	c.nextID += 2
	c.writeHeadersLocked(s, fields, end)
	if end {
		s.sentEnd = true
	}
	return s, nil
}

const maxStreamID = 1<<31 - 1

// writeHeadersLocked encodes a header block into HEADERS and, past the
// peer's frame size, CONTINUATION frames.
func (c *Conn) writeHeadersLocked(s *Stream, fields []hpack.HeaderField, end bool) {
	block := c.henc.encode(fields)
	c.out.inBlock = true
	defer func() { c.out.inBlock = false }()
	max := int(c.peerMaxFrameSize)
	first := block
	if len(first) > max {
		first = block[:max]
	}
	block = block[len(first):]
	_ = c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: first, EndStream: end, EndHeaders: len(block) == 0})
	for len(block) > 0 {
		n := min(len(block), max)
		_ = c.wfr.WriteContinuation(s.id, n == len(block), block[:n])
		block = block[n:]
	}
}

// WriteHeaders sends a header block: the response head, or, with end,
// trailers (sent after any data still queued).
func (s *Stream) WriteHeaders(fields []hpack.HeaderField, end bool) error {
	c := s.c
	c.mu.Lock()
	if s.closed || s.sentEnd || s.endQueued {
		c.mu.Unlock()
		return ErrStreamClosed
	}
	if end && len(s.pending) > 0 {
		s.trailers, s.endQueued = fields, true
		c.mu.Unlock()
		return nil
	}
	c.writeHeadersLocked(s, fields, end)
	if end {
		c.endSentLocked(s)
	}
	c.mu.Unlock()
	c.flush()
	return nil
}

// Respond queues a whole answer, head, data and trailers, which the
// writer sends in one go (data as the windows allow).
func (s *Stream) Respond(head []hpack.HeaderField, data []byte, trailers []hpack.HeaderField) error {
	c := s.c
	c.mu.Lock()
	if s.closed || s.sentEnd || s.endQueued || len(s.pending) > 0 {
		c.mu.Unlock()
		return ErrStreamClosed
	}
	c.writeHeadersLocked(s, head, false)
	c.queueLocked(s, data)
	s.endQueued, s.trailers = true, trailers
	c.sendPendingLocked(s)
	c.mu.Unlock()
	c.flush()
	return nil
}

// WriteData queues data (the stream keeps it: the caller must not
// change it) and sends what the windows allow; end closes this side
// after it.
func (s *Stream) WriteData(data []byte, end bool) error {
	c := s.c
	c.mu.Lock()
	if s.closed || s.sentEnd || s.endQueued {
		c.mu.Unlock()
		return ErrStreamClosed
	}
	c.queueLocked(s, data)
	s.endQueued = end
	c.sendPendingLocked(s)
	c.mu.Unlock()
	c.flush()
	return nil
}

// Drained returns a channel that is closed once nothing this side
// queued waits for the peer's window, or the stream ended.
func (s *Stream) Drained() <-chan struct{} {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(s.pending) == 0 || s.closed {
		return closedChan
	}
	if s.drained == nil {
		s.drained = make(chan struct{})
	}
	return s.drained
}

// Withdraw takes back the last n bytes queued, if none of them has been
// sent and nothing queued after them: a writer that gives up waiting for
// the peer's window then knows the peer will never get them. It reports
// whether it did; what is partly sent stays queued to finish.
func (s *Stream) Withdraw(n int) bool {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.closed || len(s.pending) != n || s.endQueued {
		return false
	}
	c.dropPendingLocked(s)
	return true
}

// Unsent is how much of what this side queued has not gone to the
// connection's writer yet (waiting for the peer's window), and whether
// the stream has ended; once ended, n is what it ended without sending.
func (s *Stream) Unsent() (n int, ended bool) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.closed {
		return s.dropped, true
	}
	return len(s.pending), false
}

var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// notifyDrained wakes whoever waits in Drained; under the lock.
func (s *Stream) notifyDrained() {
	if s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// Consumed gives the peer back n bytes of a paced stream's window.
func (s *Stream) Consumed(n int) {
	c := s.c
	c.mu.Lock()
	if s.closed || s.peerEnded || n <= 0 {
		c.mu.Unlock()
		return
	}
	s.recvUnacked += int64(n)
	sent := c.ackStreamLocked(s)
	c.mu.Unlock()
	if sent {
		c.flush()
	}
}

// Reset sends RST_STREAM with code and forgets the stream; the handler
// hears Closed.
func (s *Stream) Reset(code http2.ErrCode) {
	c := s.c
	c.mu.Lock()
	if s.closed {
		c.mu.Unlock()
		return
	}
	_ = c.wfr.WriteRSTStream(s.id, code)
	c.closeStreamLocked(s)
	c.mu.Unlock()
	c.flush()
	c.h.Closed(s, http2.StreamError{StreamID: s.id, Code: code, Cause: errResetHere})
}

var errResetHere = fmt.Errorf("reset by this side")

// queueLocked adds data to what s has to send (s keeps it: the caller
// must not change it).
func (c *Conn) queueLocked(s *Stream, data []byte) {
	if len(s.pending) == 0 {
		s.pending = data
	} else {
		s.pending = append(s.pending, data...)
	}
	c.pending += len(data)
}

// dropPendingLocked forgets what s had left to send.
func (c *Conn) dropPendingLocked(s *Stream) {
	c.pending -= len(s.pending)
	s.pending = nil
	s.notifyDrained()
}

// sendPendingLocked sends as much queued data as both windows and the
// peer's frame size allow, then the trailers or END_STREAM when all is
// out.
func (c *Conn) sendPendingLocked(s *Stream) {
	wroteEnd := false
	for len(s.pending) > 0 {
		n := int64(len(s.pending))
		n = min(n, s.window, c.sendWindow, int64(c.peerMaxFrameSize))
		if n <= 0 {
			if c.sendWindow <= 0 && s.window > 0 && !s.isBlocked {
				s.isBlocked = true
				c.blocked = append(c.blocked, s)
			}
			return
		}
		end := n == int64(len(s.pending)) && s.endQueued && s.trailers == nil
		_ = c.wfr.WriteData(s.id, end, s.pending[:n])
		wroteEnd = end
		s.window -= n
		c.sendWindow -= n
		c.pending -= int(n)
		s.pending = s.pending[n:]
	}
	s.pending = nil
	s.notifyDrained()
	if !s.endQueued || s.sentEnd {
		return
	}
	if s.trailers != nil {
		c.writeHeadersLocked(s, s.trailers, true)
		s.trailers = nil
	} else if !wroteEnd {
		_ = c.wfr.WriteData(s.id, true, nil)
	}
	c.endSentLocked(s)
}

func (c *Conn) endSentLocked(s *Stream) {
	s.sentEnd = true
	if s.peerEnded {
		c.closeStreamLocked(s)
	}
}

func (c *Conn) closeStreamLocked(s *Stream) {
	if s.closed {
		return
	}
	s.closed = true
	s.dropped = len(s.pending)
	c.dropPendingLocked(s)
	delete(c.streams, s.id)
	c.streamEvents++
	if s.peerEnded && s.sentEnd {
		c.earnResetLocked()
	}
	if c.goingAway && len(c.streams) == 0 {
		c.stopReading()
	}
}

// windowOpenedLocked sends what waited for the connection window.
func (c *Conn) windowOpenedLocked() {
	blocked := c.blocked
	c.blocked = nil
	for _, s := range blocked {
		s.isBlocked = false
		if !s.closed {
			c.sendPendingLocked(s)
		}
	}
}
