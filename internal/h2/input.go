package h2

import (
	"errors"
	"io"

	"golang.org/x/net/http2"
)

// input is what the reader read and the framer has not parsed yet. The
// reader looks into it to know whether the framer can parse the next
// frame without waiting for the socket: only then is it called while a
// raw read holds the socket (readEach), where waiting would deadlock.
type input struct {
	buf  []byte
	r, w int       // the unparsed bytes are buf[r:w]
	src  io.Reader // where fill reads from
	// inRaw: the socket is held by a raw read, and Read must not fill.
	inRaw bool
}

const (
	inputSize      = 32 << 10 // two frames of the largest size this side accepts
	frameHeaderLen = 9
)

func newInput(src io.Reader) *input { return &input{buf: make([]byte, inputSize), src: src} }

// Read is the framer's: buffered bytes, or what one read from src brings.
func (in *input) Read(p []byte) (int, error) {
	if in.r == in.w {
		if in.inRaw {
			return 0, errReadInRaw
		}
		if err := in.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, in.buf[in.r:in.w])
	in.r += n
	return n, nil
}

var errReadInRaw = errors.New("h2: the framer read past what was buffered while the socket was held")

// fill reads once from src into the free space.
func (in *input) fill() error {
	n, err := in.src.Read(in.space())
	in.got(n)
	switch {
	case n > 0:
		return nil
	case err == nil:
		return io.ErrNoProgress
	}
	return err
}

// space is the free room after the unparsed bytes, which move to the
// front first (they are a frame's part at most, when the reader asks),
// so that a frame that fits the buffer fits what is left.
func (in *input) space() []byte {
	if in.r > 0 {
		in.w = copy(in.buf, in.buf[in.r:in.w])
		in.r = 0
	}
	return in.buf[in.w:]
}

// got records n bytes read into space.
func (in *input) got(n int) { in.w += n }

// unparsed is how many bytes wait for the framer.
func (in *input) unparsed() int { return in.w - in.r }

// frameState is what the input holds at its front.
type frameState int

const (
	// frameWhole: a frame the framer parses without reading more; for
	// a header block, with all its CONTINUATION frames. A frame over
	// maxSize counts: the framer refuses it on its header alone.
	frameWhole frameState = iota
	// framePart: part of one; reading more into the buffer completes it.
	framePart
	// frameLong: a header block longer than the buffer, which the
	// framer must read itself, waiting for the socket as it goes.
	frameLong
)

func (in *input) next(maxSize uint32) frameState {
	b := in.buf[in.r:in.w]
	for off := 0; ; {
		end := off + frameHeaderLen
		if end > len(b) {
			return in.part(end)
		}
		h := b[off:end]
		n := uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2])
		if n > maxSize {
			return frameWhole
		}
		if end += int(n); end > len(b) {
			return in.part(end)
		}
		t, more := http2.FrameType(h[3]), http2.Flags(h[4])&http2.FlagHeadersEndHeaders == 0
		if !more || !(off == 0 && t == http2.FrameHeaders || off > 0 && t == http2.FrameContinuation) {
			// Anything else after an open block is the framer's protocol
			// error, which it finds once it has read the frame.
			return frameWhole
		}
		off = end
	}
}

// part: need unparsed bytes make the frame whole.
func (in *input) part(need int) frameState {
	if need > len(in.buf) {
		return frameLong
	}
	return framePart
}
