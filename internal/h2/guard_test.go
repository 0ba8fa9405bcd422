package h2

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
)

// cuts records what a server's CutOff heard.
type cuts struct {
	mu  sync.Mutex
	got []CutOff
}

func (c *cuts) hear(why CutOff) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, why)
}

func (c *cuts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for _, w := range c.got {
		s = append(s, string(w))
	}
	return strings.Join(s, ",")
}

// ended reports whether c has ended.
func ended(c *Conn) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

// A client that resets streams before they are answered is cut off with
// GOAWAY ENHANCE_YOUR_CALM once it has reset its budget's worth more
// than it let complete; one that lets most complete never is.
func TestResetBudget(t *testing.T) {
	const budgetOf = 10
	for _, tc := range []struct {
		name string
		// completeEvery: every this many streams, one is answered and
		// completes; the others are reset by the client (0: none
		// completes).
		completeEvery int
		streams       int
		cut           bool
	}{
		{"every stream reset", 0, 100, true},
		{"one in two reset", 2, 200, false},
		{"one in three completes", 3, 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var heard cuts
			server := newRecorder()
			server.onHead = func(s *Stream, _ []hpack.HeaderField, end bool) {
				if end && s.Value == nil && tc.completeEvery > 0 && (s.ID()/2)%uint32(tc.completeEvery) == 0 {
					_ = s.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, true)
				}
			}
			client := newRecorder()
			c, s := pair(t, Config{}, Config{ResetBudget: budgetOf, CutOff: heard.hear}, client, server)
			for i := range tc.streams {
				st, err := c.Open(request, true, nil)
				if err != nil {
					break // cut off
				}
				if tc.completeEvery > 0 && i%tc.completeEvery == 0 {
					client.until(t, "the answer", func() bool { return client.ended[st.ID()] || ended(c) })
					continue
				}
				// The server heard the request before it is reset: a
				// reset of a stream it never saw is no attack on it.
				server.until(t, "the request", func() bool { return server.ended[st.ID()] || ended(c) })
				st.Reset(http2.ErrCodeCancel)
			}
			if !tc.cut {
				time.Sleep(50 * time.Millisecond)
				if heard.String() != "" || c.Err() != nil {
					t.Fatalf("cut off (%q, %v): want the connection served", heard.String(), c.Err())
				}
				return
			}
			ends(t, s, "a client over its reset budget was not cut off")
			if !strings.Contains(fmt.Sprint(s.Err()), "ENHANCE_YOUR_CALM") {
				t.Errorf("the server ended the connection with %v: want GOAWAY ENHANCE_YOUR_CALM", s.Err())
			}
			if heard.String() != string(CutResets) {
				t.Errorf("CutOff heard %q, want %q once", heard.String(), CutResets)
			}
		})
	}
}

// A client that sends nothing, or half a preface, is cut off at the
// handshake timeout; one that finished its handshake is not.
func TestHandshakeTimeout(t *testing.T) {
	// Long enough for a real client's SETTINGS to be read on a busy
	// machine; each case waits it out.
	timeout := budget.Capped(100*time.Millisecond, 2*time.Second)
	for _, tc := range []struct {
		name  string
		sends string // what the client sends (raw) after it connects
		h2    bool   // a real client instead
	}{
		{"nothing", "", false},
		{"half a preface", http2.ClientPreface[:10], false},
		{"a preface without SETTINGS", http2.ClientPreface, false},
		{"a real client", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var heard cuts
			nc, snc := proctest.TCPPair(t)
			s := Server(snc, Config{HandshakeTimeout: timeout, CutOff: heard.hear}, newRecorder())
			t.Cleanup(func() { s.Close() })
			if tc.h2 {
				c := Client(nc, Config{}, newRecorder())
				t.Cleanup(func() { c.Close() })
				select {
				case <-s.Done():
					t.Fatalf("a client that finished its handshake was cut off: %v", s.Err())
				case <-time.After(4 * timeout):
				}
				return
			}
			defer nc.Close()
			if _, err := nc.Write([]byte(tc.sends)); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ends(t, s, "a client that never finished its handshake was not cut off")
			if took := time.Since(start); took < timeout/2 {
				t.Errorf("cut off after %v: want at the %v timeout", took, timeout)
			}
			if heard.String() != string(CutHandshake) {
				t.Errorf("CutOff heard %q, want %q", heard.String(), CutHandshake)
			}
		})
	}
}

// A connection with a stream open outlives the idle timeout; once its
// last stream ends and it stays idle, the server sends GOAWAY and it
// ends, without a word to CutOff (idleness is no misconduct).
func TestIdleTimeout(t *testing.T) {
	const idle = 100 * time.Millisecond
	var heard cuts
	server := newRecorder()
	client := newRecorder()
	c, s := pair(t, Config{}, Config{IdleTimeout: idle, CutOff: heard.hear}, client, server)
	st, err := c.Open(request, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	server.until(t, "the request", func() bool { return server.ended[st.ID()] })
	time.Sleep(4 * idle)
	if c.Err() != nil || !c.Usable() {
		t.Fatalf("a connection with a stream open went away after %v idle: %v", 4*idle, c.Err())
	}
	// The server answers; the connection is idle from then on.
	s.mu.Lock()
	served := s.streams[st.ID()]
	s.mu.Unlock()
	if err := served.WriteHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ends(t, c, "an idle connection was not sent away")
	if took := time.Since(start); took < idle/2 || took > budget.Of(time.Second) {
		t.Errorf("idle connection ended after %v: want within twice the %v timeout", took, idle)
	}
	if heard.String() != "" {
		t.Errorf("CutOff heard %q for an idle connection: want nothing", heard.String())
	}
}

// bigAnswerer answers every request with size bytes of data.
type bigAnswerer struct {
	size     int
	answered atomic.Int64
}

func (b *bigAnswerer) Headers(s *Stream, _ []hpack.HeaderField, end, _ bool) {
	if end {
		_ = s.Respond([]hpack.HeaderField{{Name: ":status", Value: "200"}}, make([]byte, b.size), nil)
		b.answered.Add(1)
	}
}
func (*bigAnswerer) Data(*Stream, []byte, bool) {}
func (*bigAnswerer) Closed(*Stream, error)      {}

// A client that asks and never reads (nor gives back a window) stops
// the server's answers at its window; past BacklogLimit, what waits for it
// stays bounded: its new streams are refused (REFUSED_STREAM), each
// counted, and the server goes on reading.
func TestClientThatNeverReads(t *testing.T) {
	const limit, size, requests = 256 << 10, 64 << 10, 200
	var refused atomic.Int64
	nc, snc := proctest.TCPPair(t)
	ans := &bigAnswerer{size: size}
	server := Server(snc, Config{BacklogLimit: limit, Backlogged: func() { refused.Add(1) }}, ans)
	t.Cleanup(func() { server.Close() })
	var out bytes.Buffer
	out.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&out, nil)
	_ = fr.WriteSettings()
	block := encodeBlock(request)
	for i := range requests {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndHeaders: true, EndStream: true})
	}
	if _, err := nc.Write(out.Bytes()); err != nil {
		t.Fatal(err)
	}
	budget.Eventually(t, 10*time.Second, "the server to answer or refuse every request", func() bool {
		return ans.answered.Load()+refused.Load() == requests
	})
	server.mu.Lock()
	held := server.queuedLocked() + server.writing + server.pending
	server.mu.Unlock()
	if max := limit + size; held > max {
		t.Errorf("the server holds %d bytes for a client that reads nothing: want at most %d (the limit and one answer)", held, max)
	}
	if n := refused.Load(); n < requests/2 {
		t.Errorf("%d of %d requests refused: want those past the limit", n, requests)
	}
	if ended(server) {
		t.Error("the connection ended: a slow reader is refused streams, not cut off")
	}
	t.Logf("%d answered, %d refused; %d bytes held (limit %d)", ans.answered.Load(), refused.Load(), held, limit)
}
