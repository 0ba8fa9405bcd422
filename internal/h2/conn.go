// Package h2 is one HTTP/2 connection (RFC 9113), either end, on
// golang.org/x/net/http2's Framer and hpack: streams, flow control on
// both directions, SETTINGS, PING, GOAWAY and RST_STREAM. It knows
// nothing of gRPC; the proxy's frame front forwards calls with it.
//
// A connection has two goroutines: the reader, which parses frames and
// calls the Handler (never under the connection's lock, so a handler may
// write on this or any other connection), and the writer, which sends
// what the streams queued. Frames are encoded into a buffer under the
// lock and written without it; whatever was queued while the last write
// ran goes out in one system call.
//
// On a plain TCP connection on Linux the reader handles frames inside
// the raw read that brought them (readEach): then a handler runs while
// the reader holds the socket, and may neither wait nor close a
// connection (fail shuts the socket down instead; the reader closes it
// when it leaves).
// It imports nothing of this module but internal/rawsock.
package h2

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/shardctl/shardctl/internal/rawsock"
)

// Handler hears what a connection's peer sends, from the reader
// goroutine. Data is only valid during the call.
type Handler interface {
	// Headers is a complete header block: a request or response head,
	// or trailers. On a server the first one opens the stream.
	// truncated: the block was over the advertised header list size.
	Headers(s *Stream, fields []hpack.HeaderField, end, truncated bool)
	// Data is a DATA frame's payload; end: the peer's side is done.
	Data(s *Stream, data []byte, end bool)
	// Closed: the stream ended before both sides finished, because the
	// peer reset it (err is a StreamError with its code), the
	// connection failed (err says why), or this side reset it.
	Closed(s *Stream, err error)
}

// BatchEnder is a Handler that also hears when the reader has handled
// every frame one read brought, before what they caused is flushed. A
// server that starts its calls there, not on each request's last frame,
// never starts one the same read also reset: a rapid-reset attacker's
// streams then cost their parsing, not a call to a backend.
type BatchEnder interface {
	BatchEnded()
}

// Config of a connection. Zero values take the defaults.
type Config struct {
	// MaxConcurrentStreams the peer may open (server; default 1000).
	MaxConcurrentStreams uint32
	// StreamWindow and ConnWindow are the receive windows advertised;
	// data is acknowledged as the handler receives it, so they bound
	// what is in flight, not what the handler keeps (defaults 1 MiB and
	// 16 MiB).
	StreamWindow int32
	ConnWindow   int32
	// MaxHeaderListSize advertised and enforced (default 1 MiB).
	MaxHeaderListSize uint32
	// OutputLimit: the reader stops reading while more than this many
	// encoded bytes wait for the socket (default 1 MiB), so a peer that
	// does not read cannot make the connection hold more.
	OutputLimit int
	// BacklogLimit (server): new streams are refused (REFUSED_STREAM,
	// safe to retry) while what waits for the socket and the data the
	// streams hold for the peer's windows are over it together. A
	// client that reads nothing stops this side's data at its window,
	// and the answers of more calls would wait in memory; the reader
	// does not stop for them, since the WINDOW_UPDATE that lets them go
	// is among what it reads. Zero: none.
	BacklogLimit int
	// Backlogged, if set, hears each stream refused for BacklogLimit.
	Backlogged func()
	// KeepAlive: after this long without a frame from the peer, a PING
	// goes out, and the connection ends if nothing comes within
	// KeepAliveTimeout (default 20 s): a peer that vanished without a
	// word is found though no call is in flight. Zero: no pings.
	KeepAlive        time.Duration
	KeepAliveTimeout time.Duration
	// HandshakeTimeout (server): the client's preface and first
	// SETTINGS (after the TLS handshake, if any) must come within it, or
	// the connection ends: a client that connects and sends nothing, or
	// a byte at a time, holds no descriptor for long. Zero: none.
	HandshakeTimeout time.Duration
	// IdleTimeout: a connection with no stream open, and none opened,
	// for this long (found within twice it) is sent GOAWAY and ends.
	// Zero: never.
	IdleTimeout time.Duration
	// ResetBudget (server): how many more streams the peer may reset
	// before this side answered them than it let complete. Spent, the
	// connection is sent GOAWAY ENHANCE_YOUR_CALM and ends: the
	// rapid-reset attack (CVE-2023-44487) opens streams and resets them
	// at once, so that the server starts work the limit of concurrent
	// streams never counts. A completed stream earns one back, and the
	// whole budget refills over resetRefill, so that a client that
	// cancels now and then is never cut off. Zero: none.
	ResetBudget int
	// CutOff, if set, hears why this side ended a peer's connection for
	// its conduct (server), once a connection.
	CutOff func(CutOff)
}

// CutOff is why a server ended a client's connection for its conduct.
type CutOff string

// Reasons a server cuts a client off.
const (
	CutResets    CutOff = "resets"    // over its ResetBudget
	CutHandshake CutOff = "handshake" // no preface and SETTINGS within HandshakeTimeout
)

// resetRefill is how long a spent ResetBudget takes to refill whole.
const resetRefill = 10 * time.Second

func (c *Config) withDefaults() Config {
	out := *c
	if out.MaxConcurrentStreams == 0 {
		out.MaxConcurrentStreams = 1000
	}
	if out.StreamWindow == 0 {
		out.StreamWindow = 1 << 20
	}
	if out.ConnWindow == 0 {
		out.ConnWindow = 16 << 20
	}
	if out.MaxHeaderListSize == 0 {
		out.MaxHeaderListSize = 1 << 20
	}
	if out.OutputLimit == 0 {
		out.OutputLimit = 1 << 20
	}
	if out.KeepAliveTimeout == 0 {
		out.KeepAliveTimeout = 20 * time.Second
	}
	return out
}

const (
	defaultWindow    = 65535
	defaultFrameSize = 16384
	maxWindow        = 1<<31 - 1
)

// Errors a caller may meet.
var (
	// ErrClosed: the connection is closed or going away; a stream not
	// opened on it was never sent.
	ErrClosed = errors.New("h2: connection closed")
	// ErrFull: the peer's limit of concurrent streams is reached.
	ErrFull = errors.New("h2: the peer's concurrent stream limit is reached")
	// ErrStreamClosed: a write on a stream that has ended.
	ErrStreamClosed = errors.New("h2: stream closed")
)

// Conn is one HTTP/2 connection.
type Conn struct {
	nc     net.Conn
	sock   *rawsock.Socket // nc's descriptor, when it is a plain TCP connection on Linux
	server bool
	cfg    Config
	h      Handler
	// the reader's
	batchEnder BatchEnder // h, when it is one
	fr         *http2.Framer
	hdec       *headerDecoder
	in         *input
	batch      batch
	sawFirst   bool  // the peer's first frame came (and was SETTINGS)
	readErr    error // what ended a raw read's frames

	mu  sync.Mutex
	out outBuf // encoded frames waiting for the writer, in order
	wfr *http2.Framer
	// ctrl are PING acknowledgements and WINDOW_UPDATEs: they go out
	// ahead of queued data, as a peer measuring round trips (grpc-go's
	// window sizing) or waiting for window expects.
	ctrl     outBuf
	cfr      *http2.Framer
	henc     *headerEncoder
	streams  map[uint32]*Stream
	nextID   uint32 // the next stream id this side opens (client)
	lastPeer uint32 // the highest stream id the peer opened (server)
	// peer's settings
	peerMaxStreams   uint32
	peerInitWindow   int32
	peerMaxFrameSize uint32
	sendWindow       int64 // connection window for what this side sends
	blocked          []*Stream
	// receive side
	recvWindow  int64 // what the peer may still send on the connection
	recvUnacked int64
	goingAway   bool   // this side sent GOAWAY, or the peer did
	peerLast    uint32 // last stream id the peer's GOAWAY processes
	err         error  // why the connection ended
	closed      bool
	flushing    bool // the reader ended: the writer says when all is written
	writing     int  // bytes the writer took and has not written yet
	pending     int  // bytes the streams hold for the peer's windows
	// busy: a goroutine writes to the socket, the writer or one that
	// flushes inline; carry is what an inline flush could not write,
	// which goes out before anything else. The buffers are the busy
	// one's spares.
	busy             bool
	carry            []byte
	spare, spareCtrl []byte
	spareMarks       []int

	wake      chan struct{} // the writer has something
	outSpace  chan struct{} // the output buffer went under the limit
	done      chan struct{} // closed when both goroutines ended
	writerEnd chan struct{}
	flushed   chan struct{}
	closeOnce sync.Once
	ended     atomic.Bool // fail ran: the reader reads no more

	// deferred: c waits in the list of flushes for the end of the
	// batches under way.
	deferred atomic.Bool
	// yielding: a shared write's goroutine yields before it flushes
	// (flushShared); the others that queue meanwhile leave the flush to
	// it.
	yielding atomic.Bool

	// lastRead is when the reader last began a batch of frames (unix nanos);
	// keepAlive checks it; pingedAt: when its PING went out, zero once
	// the peer spoke after it.
	lastRead  atomic.Int64
	keepAlive *time.Timer
	pingedAt  time.Time

	// handshook: the peer's preface and first SETTINGS came (server).
	handshook atomic.Bool
	handshake *time.Timer
	// streamEvents counts the streams opened and closed (c.mu), idleSeen
	// what it was at the idle timer's last look.
	streamEvents, idleSeen uint64
	idle                   *time.Timer
	// resetTokens is what is left of ResetBudget (c.mu), as of resetAt.
	resetTokens float64
	resetAt     time.Time
	cutOff      sync.Once
	cutting     atomic.Bool // ended for its conduct: no linger
}

// outBuf collects encoded frames; the writer swaps it out whole and
// writes it in segments, cut at frame boundaries (marks) every
// segmentSize bytes, so that control frames need not wait for all of it.
type outBuf struct {
	b     []byte
	marks []int
	last  int
	// inBlock: a header block is being written, whose frames no other
	// frame may come between.
	inBlock bool
}

const segmentSize = 32 << 10

func (o *outBuf) Write(p []byte) (int, error) {
	o.b = append(o.b, p...)
	if !o.inBlock && len(o.b)-o.last >= segmentSize {
		o.marks = append(o.marks, len(o.b))
		o.last = len(o.b)
	}
	return len(p), nil
}

// take returns what is queued and starts again on spare.
func (o *outBuf) take(spare []byte, spareMarks []int) ([]byte, []int) {
	b, m := o.b, o.marks
	o.b, o.marks, o.last = spare[:0], spareMarks[:0], 0
	return b, m
}

// Server runs the server end of nc: it reads the client preface, sends
// its SETTINGS and serves until the connection ends.
func Server(nc net.Conn, cfg Config, h Handler) *Conn {
	c := newConn(nc, true, cfg, h)
	c.start(func() error {
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(c.in, preface); err != nil {
			return err
		}
		if string(preface) != http2.ClientPreface {
			return errors.New("h2: not an HTTP/2 client preface")
		}
		return nil
	})
	return c
}

// Client runs the client end of nc: it sends the preface and SETTINGS;
// streams may be opened at once.
func Client(nc net.Conn, cfg Config, h Handler) *Conn {
	c := newConn(nc, false, cfg, h)
	c.nextID = 1
	c.ctrl.b = append(c.ctrl.b, http2.ClientPreface...) // the control lane goes out first
	c.start(nil)
	return c
}

func newConn(nc net.Conn, server bool, cfg Config, h Handler) *Conn {
	c := &Conn{nc: nc, server: server, cfg: cfg.withDefaults(), h: h,
		streams: map[uint32]*Stream{}, peerMaxStreams: ^uint32(0), peerInitWindow: defaultWindow,
		peerMaxFrameSize: defaultFrameSize, sendWindow: defaultWindow, recvWindow: defaultWindow,
		wake: make(chan struct{}, 1), outSpace: make(chan struct{}, 1), done: make(chan struct{}), writerEnd: make(chan struct{}), flushed: make(chan struct{})}
	c.batchEnder, _ = h.(BatchEnder)
	var src io.Reader = nc
	if c.sock = rawsock.New(nc); c.sock != nil {
		src = c.sock
	}
	c.in = newInput(src)
	if c.sock != nil {
		c.sock.ReadInto(c.in.space, c.gotInput)
	}
	c.fr = http2.NewFramer(nil, c.in)
	c.fr.SetReuseFrames() // a DATA frame is the handler's only during its call
	c.hdec = newHeaderDecoder(c.cfg.MaxHeaderListSize)
	c.fr.SetMaxReadFrameSize(defaultFrameSize)
	c.wfr = http2.NewFramer(&c.out, nil)
	c.cfr = http2.NewFramer(&c.ctrl, nil)
	c.henc = newHeaderEncoder()
	return c
}

func (c *Conn) start(preface func() error) {
	settings := []http2.Setting{
		{ID: http2.SettingInitialWindowSize, Val: uint32(c.cfg.StreamWindow)},
		{ID: http2.SettingMaxHeaderListSize, Val: c.cfg.MaxHeaderListSize},
	}
	if c.server {
		settings = append(settings, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.cfg.MaxConcurrentStreams})
	} else {
		settings = append(settings, http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	}
	c.mu.Lock()
	_ = c.cfr.WriteSettings(settings...)
	if more := int64(c.cfg.ConnWindow) - defaultWindow; more > 0 {
		_ = c.cfr.WriteWindowUpdate(0, uint32(more))
		c.recvWindow += more
	}
	c.resetTokens, c.resetAt = float64(c.cfg.ResetBudget), time.Now()
	c.mu.Unlock()
	c.wakeWriter()
	c.lastRead.Store(time.Now().UnixNano())
	if c.cfg.KeepAlive > 0 {
		c.keepAlive = time.AfterFunc(c.cfg.KeepAlive, c.checkAlive)
	}
	if c.server && c.cfg.HandshakeTimeout > 0 {
		c.handshake = time.AfterFunc(c.cfg.HandshakeTimeout, c.checkHandshake)
	}
	if c.cfg.IdleTimeout > 0 {
		c.idle = time.AfterFunc(c.cfg.IdleTimeout, c.checkIdle)
	}
	go c.writeLoop()
	go func() {
		err := error(nil)
		if preface != nil {
			err = preface()
		}
		if err == nil {
			err = c.readLoop()
		}
		c.linger()
		c.fail(err)
		c.closeSocket()
		if c.sock != nil {
			c.sock.Stop()
		}
		for _, t := range []*time.Timer{c.keepAlive, c.handshake, c.idle} {
			if t != nil {
				t.Stop()
			}
		}
		<-c.writerEnd
		close(c.done)
	}()
}

// Done is closed when the connection has ended and its goroutines with it.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (nil while it runs).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr is this end's address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// NetConn is the connection under this one (for a TLS state).
func (c *Conn) NetConn() net.Conn { return c.nc }

// Close ends the connection at once and waits for its goroutines; safe
// to call twice.
func (c *Conn) Close() error {
	c.fail(ErrClosed)
	<-c.done
	return nil
}

// GoAway tells the peer this side takes no new streams (server: those
// it opened so far are served); the connection ends when its last
// stream does.
func (c *Conn) GoAway() {
	c.mu.Lock()
	if c.closed || c.goingAway {
		c.mu.Unlock()
		return
	}
	c.goingAway = true
	_ = c.wfr.WriteGoAway(c.lastPeer, http2.ErrCodeNo, nil)
	idle := len(c.streams) == 0
	c.mu.Unlock()
	c.flush()
	if idle {
		c.stopReading()
	}
}

// stopReading wakes the reader to end a connection that went away and
// has no streams left.
func (c *Conn) stopReading() { _ = c.nc.SetReadDeadline(time.Now()) }

// Streams is how many streams are open.
func (c *Conn) Streams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}

// Room is how many more streams the peer's concurrent stream limit
// allows now.
func (c *Conn) Room() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.peerMaxStreams) - len(c.streams)
}

// MaxStreams is the peer's concurrent stream limit (unlimited: the
// largest uint32).
func (c *Conn) MaxStreams() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerMaxStreams
}

// checkAlive runs on the keep-alive timer: it pings a peer that has
// been quiet for KeepAlive, and ends the connection when the peer stays
// quiet for KeepAliveTimeout after the PING.
func (c *Conn) checkAlive() {
	now := time.Now()
	last := time.Unix(0, c.lastRead.Load())
	quiet := now.Sub(last)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if !last.Before(c.pingedAt) {
		c.pingedAt = time.Time{} // the peer spoke since the PING
	}
	next := c.cfg.KeepAlive - quiet
	switch {
	case next > 0:
	case c.pingedAt.IsZero():
		c.pingedAt = now
		_ = c.cfr.WritePing(false, [8]byte{'k', 'e', 'e', 'p'})
		next = c.cfg.KeepAliveTimeout
	case now.Sub(c.pingedAt) >= c.cfg.KeepAliveTimeout:
		c.mu.Unlock()
		c.fail(fmt.Errorf("h2: the peer answered nothing, not even a PING, for %v", quiet.Round(time.Millisecond)))
		return
	default:
		next = c.cfg.KeepAliveTimeout - now.Sub(c.pingedAt)
	}
	c.keepAlive.Reset(next)
	c.mu.Unlock()
	c.flush()
}

// Usable reports whether new streams may be opened on a client
// connection.
func (c *Conn) Usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && !c.goingAway
}

func (c *Conn) wakeWriter() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// fail ends the connection: every open stream hears err, the socket
// closes, the writer stops.
func (c *Conn) fail(err error) {
	if err == nil {
		err = io.EOF
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.ended.Store(true)
	c.err = err
	streams := make([]*Stream, 0, len(c.streams))
	for _, s := range c.streams {
		s.closed = true
		s.dropped = len(s.pending)
		c.dropPendingLocked(s)
		streams = append(streams, s)
	}
	c.streams = map[uint32]*Stream{}
	c.blocked = nil
	c.mu.Unlock()
	if c.sock != nil {
		// The reader may hold the socket in a raw read, and may be the
		// caller: it closes the socket once it has left the read.
		c.sock.Shutdown()
	} else {
		c.closeSocket()
	}
	c.wakeWriter()
	for _, s := range streams {
		c.h.Closed(s, fmt.Errorf("%w: %v", ErrClosed, err))
	}
}

func (c *Conn) closeSocket() { c.closeOnce.Do(func() { _ = c.nc.Close() }) }

// connError queues GOAWAY with code; the reader returns what this
// returns, and the connection ends once the GOAWAY is written.
func (c *Conn) connError(code http2.ErrCode, why string) error {
	c.mu.Lock()
	if !c.closed {
		_ = c.wfr.WriteGoAway(c.lastPeer, code, []byte(why))
		c.goingAway = true
	}
	c.mu.Unlock()
	c.wakeWriter()
	return fmt.Errorf("h2: connection error %v: %s", code, why)
}

// linger lets the writer send what is queued (a GOAWAY above all), then
// half-closes and reads what the peer still sends for a moment: closing
// with unread input would reset the connection and lose the GOAWAY.
func (c *Conn) linger() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.flushing = true
	c.mu.Unlock()
	c.wakeWriter()
	wait := lingerTime
	if c.cutting.Load() {
		// A client cut off for its conduct gets its GOAWAY if it reads
		// it at once, and nothing more: what it still sends is not read.
		wait = cutLinger
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c.flushed:
	case <-c.writerEnd:
		return
	case <-t.C:
		return
	}
	if c.cutting.Load() {
		return
	}
	if hc, ok := c.nc.(interface{ CloseWrite() error }); ok && hc.CloseWrite() == nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
		_, _ = io.Copy(io.Discard, c.nc)
	}
}

const (
	lingerTime = time.Second
	cutLinger  = 100 * time.Millisecond
)

// flushNow writes what is queued from the calling goroutine, when no
// other write is under way: one non-blocking system call, with no
// goroutine woken. What the socket does not take, and what others queue
// meanwhile, is left to the writer goroutine.
func (c *Conn) flushNow() {
	if c.sock == nil {
		c.wakeWriter()
		return
	}
	c.mu.Lock()
	if c.busy || c.closed || c.flushing || c.queuedLocked() == 0 {
		c.mu.Unlock()
		return // whoever is writing looks again when done
	}
	c.busy = true
	carry := c.carry
	ctrl, _ := c.ctrl.take(c.spareCtrl, nil)
	out, marks := c.out.take(c.spare, c.spareMarks)
	c.carry = nil
	c.writing = len(carry) + len(ctrl) + len(out)
	c.mu.Unlock()
	if testHookInlineFlush != nil {
		testHookInlineFlush(c)
	}
	n, err := c.sock.TryWrite(carry, ctrl, out)
	if err != nil {
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
		c.fail(err)
		return
	}
	c.mu.Lock()
	if n < len(carry)+len(ctrl)+len(out) {
		c.carry = appendUnwritten(nil, n, carry, ctrl, out)
	}
	c.spare, c.spareMarks, c.spareCtrl = out[:0], marks[:0], ctrl[:0]
	c.writing = 0
	c.busy = false
	more := c.queuedLocked() > 0 || c.flushing
	c.mu.Unlock()
	c.outFreed()
	if more {
		c.wakeWriter()
	}
}

// testHookInlineFlush, when set by a test, runs while an inline flush
// holds the output (busy) and before it writes.
var testHookInlineFlush func(*Conn)

// queuedLocked is how much waits for a writer.
func (c *Conn) queuedLocked() int { return len(c.carry) + len(c.ctrl.b) + len(c.out.b) }

// appendUnwritten appends to dst what is left of bufs, in order, after
// their first n bytes went out.
func appendUnwritten(dst []byte, n int, bufs ...[]byte) []byte {
	for _, b := range bufs {
		k := min(n, len(b))
		n -= k
		dst = append(dst, b[k:]...)
	}
	return dst
}

func (c *Conn) outFreed() {
	select {
	case c.outSpace <- struct{}{}:
	default:
	}
}

func (c *Conn) writeLoop() {
	defer close(c.writerEnd)
	// write sends the control lane's frames and seg in one system call;
	// false: the connection failed or is closed.
	write := func(seg []byte) bool {
		c.mu.Lock()
		ctrl, _ := c.ctrl.take(c.spareCtrl, nil)
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return false
		}
		var err error
		switch {
		case c.sock != nil:
			err = c.sock.Write(ctrl, seg)
		case len(ctrl) > 0 && len(seg) > 0:
			bufs := net.Buffers{ctrl, seg}
			_, err = bufs.WriteTo(c.nc)
		case len(ctrl) > 0:
			_, err = c.nc.Write(ctrl)
		case len(seg) > 0:
			_, err = c.nc.Write(seg)
		}
		c.mu.Lock()
		c.spareCtrl = ctrl[:0]
		c.mu.Unlock()
		if err != nil {
			c.fail(err)
			return false
		}
		return true
	}
	for range c.wake {
		for {
			c.mu.Lock()
			if c.closed {
				// Before busy: an inline flush that ends after the
				// connection failed wakes nobody.
				c.mu.Unlock()
				return
			}
			if c.busy {
				c.mu.Unlock()
				break // an inline flush is writing: it wakes this one if it leaves anything
			}
			c.busy = true
			carry := c.carry
			buf, marks := c.out.take(c.spare, c.spareMarks)
			c.carry = nil
			flushing := c.flushing
			c.writing = len(carry) + len(buf)
			c.mu.Unlock()
			// What an inline flush left first, then segment by segment,
			// each with the control frames queued meanwhile ahead of it.
			if len(carry) > 0 && !write(carry) {
				return
			}
			from := 0
			for i := 0; i == 0 || from < len(buf); i++ {
				to := len(buf)
				if i < len(marks) {
					to = marks[i]
				}
				if !write(buf[from:to]) {
					return
				}
				from = to
			}
			c.mu.Lock()
			c.spare, c.spareMarks = buf[:0], marks[:0]
			c.writing = 0
			c.busy = false
			more := c.queuedLocked() > 0
			closed := c.closed
			c.mu.Unlock()
			c.outFreed()
			if closed {
				return
			}
			if !more {
				if flushing {
					close(c.flushed)
					return
				}
				break
			}
		}
	}
}

// backloggedLocked: what waits for the socket and for the peer's windows
// is over BacklogLimit.
func (c *Conn) backloggedLocked() bool {
	return c.server && c.cfg.BacklogLimit > 0 && c.queuedLocked()+c.writing+c.pending > c.cfg.BacklogLimit
}

// outputOver: more is queued for the socket than OutputLimit allows.
func (c *Conn) outputOver() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queuedLocked()+c.writing > c.cfg.OutputLimit && !c.closed
}

// waitOutput holds the reader while the output buffer is over the
// limit: a peer that reads nothing then finds its requests unread.
func (c *Conn) waitOutput() {
	for c.outputOver() {
		c.wakeWriter()
		select {
		case <-c.outSpace:
		case <-c.writerEnd:
			return
		}
	}
}
