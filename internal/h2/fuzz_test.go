package h2

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fuzzConn is a net.Conn that reads the fuzzer's bytes and writes
// nowhere.
type fuzzConn struct {
	r       io.Reader
	written int
}

func (c *fuzzConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *fuzzConn) Write(p []byte) (int, error)      { c.written += len(p); return len(p), nil }
func (c *fuzzConn) Close() error                     { return nil }
func (c *fuzzConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fuzzConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

// echo answers every request it hears, so that the fuzzer's bytes reach
// the write side too.
type echo struct{ received int }

func (e *echo) Headers(s *Stream, _ []hpack.HeaderField, end, _ bool) {
	if end {
		_ = s.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false)
		_ = s.WriteData([]byte("answer"), false)
		_ = s.WriteHeaders([]hpack.HeaderField{{Name: "grpc-status", Value: "0"}}, true)
	}
}
func (e *echo) Data(s *Stream, data []byte, end bool) {
	e.received += len(data)
	if end {
		_ = s.WriteData(bytes.Clone(data), true)
	}
}
func (e *echo) Closed(*Stream, error) {}

// FuzzServer feeds a server connection arbitrary bytes after the
// client preface: it must end without a panic, hand the handler no more
// than it was sent, and hold no more streams than it advertises.
func FuzzServer(f *testing.F) {
	var seed bytes.Buffer
	fr := http2.NewFramer(&seed, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	block := encodeBlock([]hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: "/gateway_protocol.Gateway/Topology"}, {Name: "content-type", Value: "application/grpc"}})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true})
	_ = fr.WriteData(1, true, []byte{0, 0, 0, 0, 0})
	_ = fr.WritePing(false, [8]byte{1})
	_ = fr.WriteWindowUpdate(0, 1000)
	_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
	_ = fr.WriteGoAway(1, http2.ErrCodeNo, nil)
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0})       // an empty SETTINGS
	f.Add([]byte{0, 0, 1, 1, 4, 0, 0, 0, 1, 0x82}) // HEADERS, an indexed field
	f.Fuzz(func(t *testing.T, in []byte) {
		nc := &fuzzConn{r: io.MultiReader(bytes.NewReader([]byte(http2.ClientPreface)), bytes.NewReader(in))}
		h := &echo{}
		c := Server(nc, Config{MaxConcurrentStreams: 8}, h)
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the connection did not end at the end of its input")
		}
		if h.received > len(in) {
			t.Fatalf("the handler received %d bytes of %d sent", h.received, len(in))
		}
		if n := c.Streams(); n > 8 {
			t.Fatalf("%d streams open past the limit of 8", n)
		}
	})
}
