package h2

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
)

// recorder is a Handler that keeps what it hears and can answer.
type recorder struct {
	mu      sync.Mutex
	heads   map[uint32][][]hpack.HeaderField
	data    map[uint32]*bytes.Buffer
	ended   map[uint32]bool
	closed  map[uint32]error
	events  chan uint32
	onHead  func(s *Stream, fields []hpack.HeaderField, end bool)
	onData  func(s *Stream, data []byte, end bool)
	onClose func(s *Stream, err error)
}

func newRecorder() *recorder {
	return &recorder{heads: map[uint32][][]hpack.HeaderField{}, data: map[uint32]*bytes.Buffer{}, ended: map[uint32]bool{},
		closed: map[uint32]error{}, events: make(chan uint32, 1024)}
}

func (r *recorder) Headers(s *Stream, fields []hpack.HeaderField, end, _ bool) {
	r.mu.Lock()
	r.heads[s.ID()] = append(r.heads[s.ID()], append([]hpack.HeaderField(nil), fields...))
	if end {
		r.ended[s.ID()] = true
	}
	r.mu.Unlock()
	if r.onHead != nil {
		r.onHead(s, fields, end)
	}
	r.events <- s.ID()
}

func (r *recorder) Data(s *Stream, data []byte, end bool) {
	r.mu.Lock()
	if r.data[s.ID()] == nil {
		r.data[s.ID()] = &bytes.Buffer{}
	}
	r.data[s.ID()].Write(data)
	if end {
		r.ended[s.ID()] = true
	}
	r.mu.Unlock()
	if r.onData != nil {
		r.onData(s, data, end)
	}
	r.events <- s.ID()
}

func (r *recorder) Closed(s *Stream, err error) {
	r.mu.Lock()
	r.closed[s.ID()] = err
	r.mu.Unlock()
	if r.onClose != nil {
		r.onClose(s, err)
	}
	r.events <- s.ID()
}

// until waits for the recorder to satisfy ok.
func (r *recorder) until(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(budget.Of(10 * time.Second))
	tick := time.NewTicker(10 * time.Millisecond) // for what no handler hears (a GOAWAY)
	defer tick.Stop()
	for {
		r.mu.Lock()
		done := ok()
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-r.events:
		case <-tick.C:
		case <-deadline:
			t.Fatalf("waiting for %s: timed out", what)
		}
	}
}

// pair is a client and a server connection on loopback TCP.
func pair(t *testing.T, ccfg, scfg Config, ch, sh Handler) (*Conn, *Conn) {
	t.Helper()
	nc, snc := proctest.TCPPair(t)
	server := Server(snc, scfg, sh)
	client := Client(nc, ccfg, ch)
	t.Cleanup(func() {
		for _, c := range []*Conn{client, server} {
			closed := make(chan struct{})
			go func() { c.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(budget.Of(10 * time.Second)):
				t.Error("a connection did not end on Close: one of its goroutines waits")
			}
		}
	})
	return client, server
}

// ends waits for c to end; why is the failure if it does not.
func ends(t *testing.T, c *Conn, why string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(budget.Of(10 * time.Second)):
		t.Fatal(why)
	}
}

// encodeBlock encodes fields as a raw client's HEADERS carry them.
func encodeBlock(fields []hpack.HeaderField) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, f := range fields {
		_ = enc.WriteField(f)
	}
	return b.Bytes()
}

var request = []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: "/x"}, {Name: ":authority", Value: "a"}}

// A request and a response with data bigger than every window and
// frame: the data arrives whole, split as the peer's windows allow, and
// the trailers come after it.
func TestRoundTripThroughSmallWindows(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 40000) // 400 kB: over 65535 and 16384
	srv := newRecorder()
	srv.onData = func(s *Stream, _ []byte, end bool) {
		if end {
			_ = s.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false)
			_ = s.WriteData(body, false)
			_ = s.WriteHeaders([]hpack.HeaderField{{Name: "grpc-status", Value: "0"}}, true)
		}
	}
	cli := newRecorder()
	// Windows smaller than the data on both sides, acknowledged as read.
	small := Config{StreamWindow: 20000, ConnWindow: 30000}
	client, _ := pair(t, small, small, cli, srv)
	s, err := client.Open(request, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteData(body, true); err != nil {
		t.Fatal(err)
	}
	cli.until(t, "the response's trailers", func() bool { return cli.ended[s.ID()] })
	if got := srv.data[s.ID()].Len(); got != len(body) {
		t.Errorf("server got %d bytes, want %d", got, len(body))
	}
	if !bytes.Equal(cli.data[s.ID()].Bytes(), body) {
		t.Errorf("client got %d bytes, not the body", cli.data[s.ID()].Len())
	}
	heads := cli.heads[s.ID()]
	if len(heads) != 2 || heads[1][0].Name != "grpc-status" {
		t.Errorf("client heads %v, want the head then the trailers", heads)
	}
}

// A header block larger than a frame goes out as HEADERS and
// CONTINUATION and arrives whole.
func TestHeaderBlockOverAFrame(t *testing.T) {
	srv := newRecorder()
	client, _ := pair(t, Config{}, Config{}, newRecorder(), srv)
	big := append(append([]hpack.HeaderField(nil), request...), hpack.HeaderField{Name: "x-big", Value: strings.Repeat("v", 50000)})
	s, err := client.Open(big, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.until(t, "the request head", func() bool { return len(srv.heads[s.ID()]) == 1 })
	got := srv.heads[s.ID()][0]
	if len(got) != len(big) || got[len(got)-1].Value != big[len(big)-1].Value {
		t.Errorf("the server got %d fields, want %d with the big one whole", len(got), len(big))
	}
}

// A stream reset on one side ends on the other with the code; a GOAWAY
// makes the streams past its last id refused, safe to send elsewhere.
func TestResetAndGoAway(t *testing.T) {
	srv := newRecorder()
	cli := newRecorder()
	client, server := pair(t, Config{}, Config{}, cli, srv)
	s1, _ := client.Open(request, true, nil)
	srv.until(t, "stream 1", func() bool { return len(srv.heads[s1.ID()]) == 1 })
	s1.Reset(http2.ErrCodeCancel)
	srv.until(t, "the reset", func() bool { return srv.closed[s1.ID()] != nil })
	var se http2.StreamError
	if err := srv.closed[s1.ID()]; !errors.As(err, &se) || se.Code != http2.ErrCodeCancel {
		t.Errorf("server heard %v, want a CANCEL stream error", err)
	}
	s3, _ := client.Open(request, true, nil)
	srv.until(t, "stream 3", func() bool { return len(srv.heads[s3.ID()]) == 1 })
	server.GoAway() // processes up to stream 3
	cli.until(t, "the GOAWAY", func() bool { return !client.Usable() })
	if _, err := client.Open(request, true, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Open after GOAWAY: %v, want ErrClosed", err)
	}
	// The server still answers stream 3, then the connection ends.
	var srvStream *Stream
	server.mu.Lock()
	srvStream = server.streams[s3.ID()]
	server.mu.Unlock()
	if srvStream == nil {
		t.Fatal("the server forgot stream 3 after its GOAWAY")
	}
	_ = srvStream.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, true)
	cli.until(t, "the answer to stream 3", func() bool { return cli.ended[s3.ID()] })
	ends(t, client, "the client connection did not end after the last stream of a GOAWAY")
}

// Streams the peer's GOAWAY says it did not process end as refused.
func TestGoAwayRefusesLaterStreams(t *testing.T) {
	srv := newRecorder()
	cli := newRecorder()
	client, server := pair(t, Config{}, Config{}, cli, srv)
	s1, _ := client.Open(request, true, nil)
	srv.until(t, "stream 1", func() bool { return len(srv.heads[s1.ID()]) == 1 })
	// A GOAWAY naming stream 1 while stream 3 is on its way.
	server.mu.Lock()
	_ = server.wfr.WriteGoAway(1, http2.ErrCodeNo, nil)
	server.mu.Unlock()
	server.flush()
	cli.until(t, "the GOAWAY", func() bool { return !client.Usable() })
	client.mu.Lock()
	s3 := client.newStreamLocked(3) // opened just before the GOAWAY arrived
	client.mu.Unlock()
	client.onGoAway(&http2.GoAwayFrame{LastStreamID: 1})
	if err := cli.closed[s3.ID()]; !Refused(err) {
		t.Errorf("stream 3 ended with %v, want refused", err)
	}
}

// A peer that reads nothing: the connection holds what the windows
// allow and the output limit, and its reader stops taking frames.
func TestOutputIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := newRecorder()
	reply := bytes.Repeat([]byte("x"), 4<<20)
	srv.onHead = func(s *Stream, _ []hpack.HeaderField, end bool) {
		_ = s.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false)
		_ = s.WriteData(reply, true)
	}
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			c := Server(nc, Config{OutputLimit: 64 << 10}, srv)
			t.Cleanup(func() { c.Close() })
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A raw client with the largest windows, which then reads nothing.
	fr := http2.NewFramer(nc, nc)
	block := encodeBlock(request)
	_, _ = nc.Write([]byte(http2.ClientPreface))
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxWindow})
	_ = fr.WriteWindowUpdate(0, maxWindow-defaultWindow)
	_ = nc.SetWriteDeadline(time.Now().Add(budget.Of(time.Second)))
	// Requests of 16 kB each: more than the socket buffers hold, so the
	// client blocks once the server stops reading.
	payload := make([]byte, 16<<10)
	sent := 0
	for id := uint32(1); id < 2000; id += 2 {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
			break
		}
		if err := fr.WriteData(id, true, payload); err != nil {
			break
		}
		sent++
	}
	srv.mu.Lock()
	heard := len(srv.heads)
	srv.mu.Unlock()
	if sent == 1000 {
		t.Fatalf("the server took all %d requests from a client that reads nothing (heard %d)", sent, heard)
	}
	// Each request it heard queued 4 MiB: the reader stopped after the
	// output limit, give or take what one frame read adds.
	if heard > 8 {
		t.Errorf("the server read %d requests of a client that reads nothing, want it to stop after a few", heard)
	}
	t.Logf("client wrote %d requests before blocking; the server heard %d", sent, heard)
}

// A paced stream gets no more than its window until its reader says it
// consumed what came; then the rest follows.
func TestPacedStreamWaitsForItsReader(t *testing.T) {
	const window = 32 << 10
	reply := bytes.Repeat([]byte("y"), 4*window)
	srv := newRecorder()
	srv.onHead = func(s *Stream, _ []hpack.HeaderField, end bool) {
		_ = s.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false)
		_ = s.WriteData(reply, true)
	}
	cli := newRecorder()
	client, _ := pair(t, Config{StreamWindow: window}, Config{}, cli, srv)
	s, err := client.Request(request, nil, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	got := func() int {
		if b := cli.data[s.ID()]; b != nil {
			return b.Len()
		}
		return 0
	}
	cli.until(t, "a window of data", func() bool { return got() == window })
	// Nothing past the window while nothing is consumed, however long
	// the peer waits.
	time.Sleep(budget.Of(100 * time.Millisecond))
	cli.mu.Lock()
	n := got()
	cli.mu.Unlock()
	if n != window {
		t.Fatalf("the client got %d bytes with none consumed, want the window of %d", n, window)
	}
	for consumed := 0; !func() bool { cli.mu.Lock(); defer cli.mu.Unlock(); return cli.ended[s.ID()] }(); {
		cli.mu.Lock()
		n := got()
		cli.mu.Unlock()
		if n > consumed {
			s.Consumed(n - consumed)
			consumed = n
		}
		cli.until(t, "more data", func() bool { return got() > consumed || cli.ended[s.ID()] })
	}
	if !bytes.Equal(cli.data[s.ID()].Bytes(), reply) {
		t.Errorf("the client got %d bytes, not the reply", cli.data[s.ID()].Len())
	}
}

// A peer that goes quiet, not even answering a PING, ends the
// connection after KeepAlive and KeepAliveTimeout; one that answers
// keeps it.
func TestKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers bool
	}{
		{"a peer that answers", true},
		{"a peer gone quiet", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			peerDone := make(chan struct{})
			defer func() { <-peerDone }()
			go func() {
				defer close(peerDone)
				nc, err := ln.Accept()
				if err != nil {
					return
				}
				defer nc.Close()
				if tc.answers {
					s := Server(nc, Config{}, newRecorder())
					<-s.Done()
					return
				}
				// Reads the preface and whatever follows, answers nothing.
				_, _ = io.Copy(io.Discard, nc)
			}()
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{KeepAlive: 50 * time.Millisecond, KeepAliveTimeout: 50 * time.Millisecond}
			c := Client(nc, cfg, newRecorder())
			defer c.Close()
			select {
			case <-c.Done():
				if tc.answers {
					t.Fatalf("the connection ended though the peer answers its PINGs: %v", c.Err())
				}
				if !strings.Contains(c.Err().Error(), "PING") {
					t.Errorf("the connection ended with %v, want a word on the unanswered PING", c.Err())
				}
			case <-time.After(budget.Of(time.Second)):
				if !tc.answers {
					t.Fatal("the connection outlived a peer that answered nothing for a second")
				}
			}
		})
	}
}
