package h2

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/net/http2"
)

// What the reader may hand the framer while a raw read holds the
// socket: only what it parses without reading on.
func TestInputNext(t *testing.T) {
	frames := func(write func(fr *http2.Framer)) []byte {
		var b bytes.Buffer
		write(http2.NewFramer(&b, nil))
		return b.Bytes()
	}
	ping := frames(func(fr *http2.Framer) { _ = fr.WritePing(false, [8]byte{}) })
	open := frames(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}})
		_ = fr.WriteContinuation(1, false, []byte{0x86})
	})
	closing := frames(func(fr *http2.Framer) { _ = fr.WriteContinuation(1, true, []byte{0x84}) })
	big := bytes.Repeat([]byte{0x82}, inputSize/2)
	long := frames(func(fr *http2.Framer) {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: big[:defaultFrameSize]})
		_ = fr.WriteContinuation(1, false, big[:defaultFrameSize])
		_ = fr.WriteContinuation(1, true, []byte{0x84})
	})
	tooBig := []byte{0x01, 0, 0, byte(http2.FrameData), 0, 0, 0, 0, 1} // 65536 bytes declared
	for _, tc := range []struct {
		name string
		in   []byte
		want frameState
	}{
		{"nothing", nil, framePart},
		{"part of a header", ping[:5], framePart},
		{"a header without its payload", ping[:frameHeaderLen], framePart},
		{"a whole frame", ping, frameWhole},
		{"a frame and part of the next", append(append([]byte(nil), ping...), ping[:3]...), frameWhole},
		{"a header block missing its last CONTINUATION", open, framePart},
		{"a whole header block", append(append([]byte(nil), open...), closing...), frameWhole},
		{"an open block, then another frame (the framer's error)", append(append([]byte(nil), open...), ping...), frameWhole},
		{"a frame over the size limit", tooBig, frameWhole},
		{"a header block longer than the buffer", long[:inputSize-100], frameLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInput(nil)
			in.got(copy(in.space(), tc.in))
			if got := in.next(defaultFrameSize); got != tc.want {
				t.Errorf("next = %d, want %d", got, tc.want)
			}
		})
	}
}

// The framer never waits for the socket while a raw read holds it: a
// read past what is buffered is an error, not a deadlock.
func TestInputReadInRaw(t *testing.T) {
	in := newInput(bytes.NewReader([]byte("more")))
	in.got(copy(in.space(), "ab"))
	in.inRaw = true
	p := make([]byte, 4)
	if n, err := in.Read(p); n != 2 || err != nil {
		t.Fatalf("Read = %d, %v; want the 2 buffered bytes", n, err)
	}
	if _, err := in.Read(p); !errors.Is(err, errReadInRaw) {
		t.Fatalf("Read past the buffer in a raw read = %v, want errReadInRaw", err)
	}
	in.inRaw = false
	if n, err := in.Read(p); n != 4 || err != nil || string(p) != "more" {
		t.Fatalf("Read = %d %q, %v; want what the source has", n, p[:n], err)
	}
}
