package h2

import (
	"errors"
	"io"
	"net"
	"strconv"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// ErrRefused is how a stream ends that the peer's GOAWAY says it never
// processed: it is safe to send again elsewhere. A RST_STREAM with
// REFUSED_STREAM says the same (a StreamError with that code).
var ErrRefused = errors.New("h2: the peer went away before it processed the stream")

// Refused reports an error that proves the peer did not process the
// stream.
func Refused(err error) bool {
	var se http2.StreamError
	return errors.Is(err, ErrRefused) || errors.As(err, &se) && se.Code == http2.ErrCodeRefusedStream
}

func (c *Conn) readLoop() error {
	// Not endBatch: a connection that ends starts nothing it was asked.
	defer c.batch.end()
	err := c.readFrames()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.mu.Lock()
		away := c.goingAway
		c.mu.Unlock()
		if away {
			return ErrClosed // went away, and the last stream ended
		}
	}
	return err
}

// readFrames handles the frames the input holds, and reads more when
// it holds no whole one. The batch ends before every read, or a peer
// waiting for a window update or a PING's answer would never send it.
func (c *Conn) readFrames() error {
	for {
		if c.ended.Load() {
			return ErrClosed
		}
		next, err := c.parseWhole()
		if err != nil {
			return err
		}
		c.endBatch()
		c.waitOutput()
		switch {
		case next == frameLong:
			err = c.parseFrame() // the framer reads the rest itself
		case c.sock != nil:
			c.in.inRaw = true
			c.readErr = nil
			err = c.sock.ReadEach()
			c.in.inRaw = false
			if c.readErr != nil {
				err = c.readErr
			}
		default:
			err = c.in.fill()
		}
		if errors.Is(err, io.EOF) && c.in.unparsed() > 0 {
			err = io.ErrUnexpectedEOF // the peer left in a frame
		}
		if err != nil {
			return err
		}
	}
}

// gotInput is the raw read's: it handles the frames that n more bytes
// completed, and says whether to read on (false: the reader leaves the
// read, to end, to wait for the output to drain, or to have the framer
// read a long header block).
func (c *Conn) gotInput(n int) bool {
	c.in.got(n)
	next, err := c.parseWhole()
	if err != nil {
		c.readErr = err
		return false
	}
	c.endBatch()
	return !c.ended.Load() && next == framePart && !c.outputOver()
}

// endBatch ends the reader's batch, if one is under way, after telling
// the handler.
func (c *Conn) endBatch() {
	if c.batch.on && c.batchEnder != nil {
		c.batchEnder.BatchEnded()
	}
	c.batch.end()
}

// parseWhole handles every whole frame the input holds, and says what
// is left at its front.
func (c *Conn) parseWhole() (frameState, error) {
	for {
		next := c.in.next(defaultFrameSize)
		if next != frameWhole {
			return next, nil
		}
		if err := c.parseFrame(); err != nil {
			return next, err
		}
	}
}

// parseFrame reads one frame (one header block) and handles it; an
// error ends the connection.
func (c *Conn) parseFrame() error {
	f, err := c.fr.ReadFrame()
	var block headerBlock
	detail := ""
	if hf, ok := f.(*http2.HeadersFrame); ok && err == nil {
		block, detail, err = c.hdec.read(c.fr, hf)
	}
	if c.batch.begin() {
		// Once a read, not once a frame: the clock is read per batch,
		// which is as fresh as keep-alive needs.
		c.lastRead.Store(time.Now().UnixNano())
	}
	if err != nil {
		if detail == "" {
			detail = errDetail(c.fr, err)
		}
		err, _ = c.frameError(err, detail) // a read error as it is
		return err
	}
	if !c.sawFirst {
		c.sawFirst = true
		if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
			return c.connError(http2.ErrCodeProtocol, "the first frame must be SETTINGS")
		}
		c.handshook.Store(true)
		if c.handshake != nil {
			c.handshake.Stop()
		}
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		err = c.onSettings(f)
	case *http2.HeadersFrame:
		err = c.onHeaders(&block)
	case *http2.DataFrame:
		err = c.onData(f)
	case *http2.WindowUpdateFrame:
		err = c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		err = c.onReset(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.mu.Lock()
			_ = c.cfr.WritePing(true, f.Data)
			c.mu.Unlock()
			c.flush()
		}
	case *http2.GoAwayFrame:
		c.onGoAway(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			c.streamError(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.PushPromiseFrame:
		err = c.connError(http2.ErrCodeProtocol, "PUSH_PROMISE is not allowed")
	}
	return err
}

// frameError answers a stream or connection error the peer's frames
// caused (ok), and returns what ends the connection (nil: it goes on).
func (c *Conn) frameError(err error, detail string) (_ error, ok bool) {
	var se http2.StreamError
	if errors.As(err, &se) {
		c.mu.Lock()
		if c.server && se.StreamID%2 == 1 && se.StreamID > c.lastPeer {
			c.lastPeer = se.StreamID
		}
		c.mu.Unlock()
		c.streamError(se.StreamID, se.Code)
		return nil, true
	}
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		return c.connError(http2.ErrCode(ce), detail), true
	}
	return err, false
}

// contentLength is a request's content-length, -1 when it has none (or
// one that does not parse: then nothing can be checked against it).
func contentLength(fields []hpack.HeaderField) int64 {
	for _, hf := range fields {
		if hf.Name == "content-length" {
			if n, err := strconv.ParseInt(hf.Value, 10, 64); err == nil && n >= 0 {
				return n
			}
		}
	}
	return -1
}

func errDetail(fr *http2.Framer, err error) string {
	if d := fr.ErrorDetail(); d != nil {
		return d.Error()
	}
	return err.Error()
}

// streamError resets a stream for a fault of the peer's.
func (c *Conn) streamError(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	_ = c.wfr.WriteRSTStream(id, code)
	s := c.streams[id]
	if s != nil {
		c.closeStreamLocked(s)
	}
	c.mu.Unlock()
	c.flush()
	if s != nil {
		c.h.Closed(s, http2.StreamError{StreamID: id, Code: code, Cause: errPeerFault})
	}
}

var errPeerFault = errors.New("the peer broke the protocol")

// idle reports a stream id neither side has opened yet.
func (c *Conn) idleLocked(id uint32) bool {
	if c.server {
		return id%2 == 1 && id > c.lastPeer || id%2 == 0
	}
	return id%2 == 1 && id >= c.nextID || id%2 == 0
}

func (c *Conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if err := f.ForeachSetting(func(s http2.Setting) error { return s.Valid() }); err != nil {
		var ce http2.ConnectionError
		if errors.As(err, &ce) {
			return c.connError(http2.ErrCode(ce), err.Error())
		}
		return c.connError(http2.ErrCodeProtocol, err.Error())
	}
	c.mu.Lock()
	defer c.flush()
	defer c.mu.Unlock()
	var flowErr bool
	_ = f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingHeaderTableSize:
			c.henc.enc.SetMaxDynamicTableSizeLimit(s.Val)
		case http2.SettingMaxFrameSize:
			c.peerMaxFrameSize = s.Val
		case http2.SettingMaxConcurrentStreams:
			c.peerMaxStreams = s.Val
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - int64(c.peerInitWindow)
			c.peerInitWindow = int32(s.Val)
			for _, st := range c.streams {
				st.window += delta
				if st.window > maxWindow {
					flowErr = true
				}
			}
		}
		return nil
	})
	if flowErr {
		c.mu.Unlock()
		err := c.connError(http2.ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream's window")
		c.mu.Lock()
		return err
	}
	_ = c.wfr.WriteSettingsAck()
	for _, st := range c.streams {
		if len(st.pending) > 0 || st.endQueued && !st.sentEnd {
			c.sendPendingLocked(st)
		}
	}
	return nil
}

func (c *Conn) onHeaders(f *headerBlock) error {
	id := f.streamID
	end := f.endStream
	if f.selfPriority {
		c.streamError(id, http2.ErrCodeProtocol)
		return nil
	}
	if c.server && id%2 == 0 {
		return c.connError(http2.ErrCodeProtocol, "a client opened an even-numbered stream")
	}
	c.mu.Lock()
	s := c.streams[id]
	if s == nil {
		if !c.server || !c.idleLocked(id) {
			closed := !c.idleLocked(id)
			c.mu.Unlock()
			if closed && !c.server {
				return nil // a stream this side reset: its answer may still come
			}
			if closed {
				return c.connError(http2.ErrCodeStreamClosed, "HEADERS on a closed stream")
			}
			return c.connError(http2.ErrCodeProtocol, "HEADERS on a stream the client may not open")
		}
		c.lastPeer = id
		if c.goingAway || uint32(len(c.streams)) >= c.cfg.MaxConcurrentStreams {
			c.mu.Unlock()
			c.streamError(id, http2.ErrCodeRefusedStream)
			return nil
		}
		if c.backloggedLocked() {
			c.mu.Unlock()
			c.streamError(id, http2.ErrCodeRefusedStream)
			if c.cfg.Backlogged != nil {
				c.cfg.Backlogged()
			}
			return nil
		}
		s = c.newStreamLocked(id)
		s.wantLen = contentLength(f.fields)
	} else {
		if s.peerEnded {
			c.mu.Unlock()
			c.streamError(id, http2.ErrCodeStreamClosed)
			return nil
		}
		if c.server && !end {
			c.mu.Unlock()
			c.streamError(id, http2.ErrCodeProtocol) // trailers must end the stream
			return nil
		}
	}
	if end {
		s.peerEnded = true
		if s.sentEnd {
			c.closeStreamLocked(s)
		}
	}
	c.mu.Unlock()
	c.h.Headers(s, f.fields, end, f.truncated)
	return nil
}

func (c *Conn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int64(f.Length)
	end := f.StreamEnded()
	c.mu.Lock()
	if n > c.recvWindow {
		c.mu.Unlock()
		return c.connError(http2.ErrCodeFlowControl, "DATA past the connection's window")
	}
	c.recvWindow -= n
	c.recvUnacked += n
	c.ackConnLocked()
	s := c.streams[id]
	if s == nil {
		idle := c.idleLocked(id)
		c.mu.Unlock()
		c.flush()
		switch {
		case idle:
			return c.connError(http2.ErrCodeProtocol, "DATA on an idle stream")
		case c.server:
			c.streamError(id, http2.ErrCodeStreamClosed)
		}
		return nil
	}
	if s.peerEnded {
		c.mu.Unlock()
		c.streamError(id, http2.ErrCodeStreamClosed)
		return nil
	}
	if n > s.recvWindow {
		c.mu.Unlock()
		c.streamError(id, http2.ErrCodeFlowControl)
		return nil
	}
	s.recvWindow -= n
	if !s.paced {
		s.recvUnacked += n
	}
	s.gotLen += int64(len(f.Data()))
	if s.wantLen >= 0 && (s.gotLen > s.wantLen || end && s.gotLen != s.wantLen) {
		c.mu.Unlock()
		c.streamError(id, http2.ErrCodeProtocol) // malformed: content-length is not what came
		return nil
	}
	if end {
		s.peerEnded = true
		if s.sentEnd {
			c.closeStreamLocked(s)
		}
	} else {
		c.ackStreamLocked(s)
	}
	c.mu.Unlock()
	c.flush()
	c.h.Data(s, f.Data(), end)
	return nil
}

// ackStreamLocked gives the peer back the stream's window once a quarter
// of it is taken; it reports whether it wrote a WINDOW_UPDATE.
func (c *Conn) ackStreamLocked(s *Stream) bool {
	if s.recvUnacked < int64(c.cfg.StreamWindow)/4 {
		return false
	}
	_ = c.cfr.WriteWindowUpdate(s.id, uint32(s.recvUnacked))
	s.recvWindow += s.recvUnacked
	s.recvUnacked = 0
	return true
}

// ackConnLocked gives the peer back the connection window once a
// quarter of it is used: the handler has taken the data.
func (c *Conn) ackConnLocked() {
	if c.recvUnacked >= int64(c.cfg.ConnWindow)/4 {
		_ = c.cfr.WriteWindowUpdate(0, uint32(c.recvUnacked))
		c.recvWindow += c.recvUnacked
		c.recvUnacked = 0
	}
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > maxWindow {
			c.mu.Unlock()
			return c.connError(http2.ErrCodeFlowControl, "WINDOW_UPDATE overflows the connection's window")
		}
		c.windowOpenedLocked()
		c.mu.Unlock()
		c.flush()
		return nil
	}
	s := c.streams[f.StreamID]
	if s == nil {
		idle := c.idleLocked(f.StreamID)
		c.mu.Unlock()
		if idle {
			return c.connError(http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream")
		}
		return nil
	}
	s.window += int64(f.Increment)
	if s.window > maxWindow {
		c.mu.Unlock()
		c.streamError(f.StreamID, http2.ErrCodeFlowControl)
		return nil
	}
	c.sendPendingLocked(s)
	c.mu.Unlock()
	c.flush()
	return nil
}

func (c *Conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	s := c.streams[f.StreamID]
	if s == nil {
		idle := c.idleLocked(f.StreamID)
		c.mu.Unlock()
		if idle {
			return c.connError(http2.ErrCodeProtocol, "RST_STREAM on an idle stream")
		}
		return nil
	}
	within := c.spendResetLocked(s)
	c.closeStreamLocked(s)
	c.mu.Unlock()
	c.h.Closed(s, http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode, Cause: errResetByPeer})
	if !within {
		return c.resetsSpent()
	}
	return nil
}

var errResetByPeer = errors.New("reset by the peer")

// onGoAway: the peer takes no new streams. On a client, streams past
// the last one it names were never processed and end as refused.
func (c *Conn) onGoAway(f *http2.GoAwayFrame) {
	c.mu.Lock()
	c.goingAway = true
	c.peerLast = f.LastStreamID
	var refused []*Stream
	if !c.server {
		for id, s := range c.streams {
			if id > f.LastStreamID {
				refused = append(refused, s)
			}
		}
		for _, s := range refused {
			c.closeStreamLocked(s)
		}
	}
	if len(c.streams) == 0 {
		c.stopReading()
	}
	c.mu.Unlock()
	for _, s := range refused {
		c.h.Closed(s, ErrRefused)
	}
}
