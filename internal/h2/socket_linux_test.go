package h2

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/shardctl/shardctl/internal/budget"
)

// A reader that has emptied the socket waits for the poller rather
// than asking the socket again only to hear it has nothing (EAGAIN):
// one request at a time, each in one read, costs no empty reads.
func TestNoEmptyReadAfterAShortRead(t *testing.T) {
	srv := newRecorder()
	client, server := pair(t, Config{}, Config{}, newRecorder(), srv)
	const requests = 100
	for i := range requests {
		s, err := client.Open(request, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv.until(t, fmt.Sprintf("request %d", i), func() bool { return srv.ended[s.ID()] })
	}
	// A few at the start (the preface and SETTINGS) are not what this is about.
	if empty := server.sock.EmptyReads(); empty > requests/10 {
		t.Errorf("%d reads found the socket empty for %d requests (one a request: the poller is not trusted)", empty, requests)
	}
}

// A handler may end its own connection while the reader holds the
// socket in a raw read: the socket is shut down, not closed (a close
// would wait for the read, that is for itself).
func TestFailFromInsideARead(t *testing.T) {
	srv := newRecorder()
	srv.onHead = func(s *Stream, _ []hpack.HeaderField, _ bool) {
		if s.ID() > 1 {
			s.Conn().fail(errors.New("the handler ended it"))
		}
	}
	client, server := pair(t, Config{}, Config{}, newRecorder(), srv)
	// The first request comes with the preface, which is read outside a
	// raw read; the second is not.
	first, err := client.Open(request, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.until(t, "the first request", func() bool { return srv.ended[first.ID()] })
	if _, err := client.Open(request, true, nil); err != nil {
		t.Fatal(err)
	}
	ends(t, server, "the connection a handler failed from inside its read did not end")
	ends(t, client, "the peer of a failed connection did not hear it end")
}

// A peer that sends its last frames and leaves at once (FIN or RST
// right behind the data, often seen by the poller as one event): the
// connection ends, though the read that brought the frames was short.
func TestPeerLeavesRightAfterItsLastFrames(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			for i := range 8 {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				accepted := make(chan *Conn, 1)
				go func() {
					// The listener closes once it has accepted: closed
					// earlier, it resets a connection still in its queue.
					nc, err := ln.Accept()
					ln.Close()
					if err == nil {
						accepted <- Server(nc, Config{}, newRecorder())
					}
					close(accepted)
				}()
				nc, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				fr := http2.NewFramer(nc, nc)
				_, _ = nc.Write([]byte(http2.ClientPreface))
				_ = fr.WriteSettings()
				for range 3 { // the server's SETTINGS and WINDOW_UPDATE, and its ACK of ours: it reads
					if _, err := fr.ReadFrame(); err != nil {
						t.Fatal(err)
					}
				}
				server := <-accepted
				time.Sleep(time.Duration(i%4) * time.Millisecond)
				var b bytes.Buffer
				last := http2.NewFramer(&b, nil)
				_ = last.WriteWindowUpdate(0, uint32(1000+i)) // which has no answer that would meet the close
				if reset {
					_ = nc.(*net.TCPConn).SetLinger(0)
				}
				_, _ = nc.Write(b.Bytes())
				nc.Close()
				select {
				case <-server.Done():
				case <-time.After(budget.Of(5 * time.Second)):
					server.Close()
					t.Fatalf("try %d: the connection did not see its peer leave", i)
				}
			}
		})
	}
}

// A connection that fails while a goroutine flushes inline (the writer
// goroutine finds the output busy and waits to be woken) still ends:
// the inline flush that finds the socket gone wakes nobody, so the
// writer must not wait for it.
func TestFailDuringAnInlineFlush(t *testing.T) {
	srv := newRecorder()
	srv.onHead = func(s *Stream, _ []hpack.HeaderField, end bool) {
		if end {
			_ = s.Respond([]hpack.HeaderField{{Name: ":status", Value: "200"}}, nil, []hpack.HeaderField{{Name: "grpc-status", Value: "0"}})
		}
	}
	var target atomic.Pointer[Conn]
	var once sync.Once
	var fired atomic.Bool
	testHookInlineFlush = func(c *Conn) {
		if c != target.Load() {
			return
		}
		once.Do(func() {
			fired.Store(true)
			c.fail(errors.New("failed during an inline flush"))
			// Give the woken writer time to find the output busy.
			time.Sleep(50 * time.Millisecond)
		})
	}
	// Registered before pair's: runs after both connections are closed.
	t.Cleanup(func() { testHookInlineFlush = nil })
	client, server := pair(t, Config{}, Config{}, answered{}, srv)
	target.Store(server)
	// An answer goes out inline only when the writer is idle: one that
	// found it busy (an ACK of SETTINGS, say) is the writer's to send and
	// passes no hook, so ask again until one did.
	for i := 0; !fired.Load(); i++ {
		if i == 1000 {
			t.Fatal("no answer was flushed inline in 1000 requests")
		}
		done := make(chan struct{})
		if _, err := client.Open(request, true, done); err != nil {
			break // the server failed meanwhile
		}
		select {
		case <-done:
		case <-server.Done():
		case <-time.After(budget.Of(5 * time.Second)):
			t.Fatal("no answer to a request")
		}
	}
	ends(t, server, "a connection that failed during an inline flush did not end: its writer waits")
}
