package rawsock

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
)

func TestNewTakesPlainTCPOnly(t *testing.T) {
	a, _ := proctest.TCPPair(t)
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	for _, c := range []struct {
		name string
		nc   net.Conn
		want bool
	}{
		{"tcp", a, true},
		{"pipe", p1, false},
		{"tls over tcp", tls.Client(a, &tls.Config{}), false},
	} {
		if got := New(c.nc) != nil; got != c.want {
			t.Errorf("New(%s) != nil is %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRead(t *testing.T) {
	for _, c := range []struct {
		name     string
		peer     func(peer *net.TCPConn, local *net.TCPConn)
		want     string
		wantErr  func(error) bool
		describe string
	}{
		{"data", func(p, _ *net.TCPConn) { _, _ = p.Write([]byte("hello")) }, "hello", nil, ""},
		{"end", func(p, _ *net.TCPConn) { _ = p.CloseWrite() }, "", func(err error) bool { return err == io.EOF }, "io.EOF"},
		{"reset", func(p, _ *net.TCPConn) { _ = p.SetLinger(0); _ = p.Close() }, "", func(err error) bool {
			return err != nil && err != io.EOF
		}, "an error other than io.EOF"},
		{"deadline", func(_, l *net.TCPConn) { _ = l.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) }, "", func(err error) bool {
			var ne net.Error
			return errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &ne) && ne.Timeout()
		}, "a timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			local, peer := proctest.TCPPair(t)
			s := New(local)
			defer s.Stop()
			c.peer(peer, local)
			var b [64]byte
			n, err := s.Read(b[:])
			if c.wantErr == nil {
				if err != nil || string(b[:n]) != c.want {
					t.Fatalf("Read = %q, %v; want %q", b[:n], err, c.want)
				}
				return
			}
			if !c.wantErr(err) {
				t.Fatalf("Read = %d, %v; want %s", n, err, c.describe)
			}
		})
	}
}

// A write larger than the socket's buffers waits in the poller for room
// and delivers everything in order; TryWrite takes what fits and returns.
func TestWriteWaitsTryWriteDoesNot(t *testing.T) {
	local, peer := proctest.TCPPair(t)
	s := New(local)
	defer s.Stop()
	// Larger than the most a loopback socket buffers on both ends with
	// Linux's default limits (tcp_wmem 4 MiB, tcp_rmem 6 MiB).
	a, b := bytes.Repeat([]byte("a"), 8<<20), bytes.Repeat([]byte("b"), 8<<20)

	// Nobody reads yet: TryWrite returns with part of it, without error.
	n, err := s.TryWrite(a, b)
	if err != nil || n <= 0 || n >= len(a)+len(b) {
		t.Fatalf("TryWrite of 16 MiB nobody reads = %d, %v; want part of it and no error", n, err)
	}
	var got bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = peer.SetReadDeadline(time.Now().Add(budget.Of(20 * time.Second)))
		_, _ = io.CopyN(&got, peer, int64(n+len(a)+len(b)))
	}()
	if err := s.Write(a, b); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	want := append(append(append([]byte{}, a...), b...)[:n], append(append([]byte{}, a...), b...)...)
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("peer got %d bytes, want %d in order", got.Len(), len(want))
	}
}

// A reader that has emptied the socket in ReadEach waits for the poller
// instead of reading again only to hear EAGAIN: one message at a time,
// each answered before the next, costs (almost) no empty reads.
func TestReadEachSkipsTheEmptyRead(t *testing.T) {
	local, peer := proctest.TCPPair(t)
	s := New(local)
	defer s.Stop()
	const messages = 200
	buf := make([]byte, 4096)
	var got int
	s.ReadInto(func() []byte { return buf }, func(n int) bool {
		got += n
		_, _ = local.Write([]byte{'!'}) // the answer, on which the peer sends the next
		return got < messages
	})
	done := make(chan error, 1)
	go func() { done <- s.ReadEach() }()
	var ack [1]byte
	_ = peer.SetDeadline(time.Now().Add(budget.Of(20 * time.Second)))
	for i := range messages {
		if _, err := peer.Write([]byte{'m'}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(peer, ack[:]); err != nil {
			t.Fatalf("message %d not answered: %v", i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	empty := s.EmptyReads()
	if empty > messages/10 {
		t.Errorf("%d reads found the socket empty for %d messages (the poller is not trusted)", empty, messages)
	}
	// Read, which always asks the socket first, is the comparison: each
	// wait costs it one empty read.
	for range 20 {
		go func() { time.Sleep(10 * time.Millisecond); _, _ = peer.Write([]byte{'m'}) }() // late enough that Read asks first, on a busy machine too
		if _, err := s.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if more := s.EmptyReads() - empty; more < 10 {
		t.Errorf("Read found the socket empty %d times waiting 20 times for a late message: the count does not count", more)
	}
}

// Answer sends the answer from inside the read of the reply, so a peer
// that speaks only when answered is heard with no empty read; what the
// peer sent before Answer began is found by the timer, not lost.
func TestAnswer(t *testing.T) {
	local, peer := proctest.TCPPair(t)
	s := New(local)
	defer s.Stop()
	_ = peer.SetDeadline(time.Now().Add(budget.Of(20 * time.Second)))
	buf := make([]byte, 4096)
	if _, err := peer.Write([]byte("q0")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Read(buf); err != nil || string(buf[:n]) != "q0" {
		t.Fatalf("first read: %q %v", buf[:n], err)
	}
	const exchanges = 200
	go func() { // the peer: reads each answer, then asks the next
		var a [2]byte
		for i := 1; i <= exchanges; i++ {
			if _, err := io.ReadFull(peer, a[:]); err != nil {
				return
			}
			_, _ = peer.Write([]byte("q" + string(rune('0'+i%10))))
		}
	}()
	empty := s.EmptyReads()
	for i := 1; i <= exchanges; i++ {
		n, kicked, err := s.Answer([]byte("a!"), buf, true)
		if err != nil || kicked || n != 2 || buf[1] != byte('0'+i%10) {
			t.Fatalf("exchange %d: %q kicked=%v %v", i, buf[:n], kicked, err)
		}
	}
	if more := s.EmptyReads() - empty; more > exchanges/10 {
		t.Errorf("%d empty reads in %d exchanges", more, exchanges)
	}
	var a [2]byte

	// The peer's next message is in the socket before Answer begins: the
	// poller will not report it, the timer ends the wait.
	for _, next := range []struct {
		name string
		send func()
		want string
		err  error
	}{
		{"pipelined data", func() { _, _ = peer.Write([]byte("p1")) }, "p1", nil},
		{"a FIN", func() { _ = peer.CloseWrite() }, "", io.EOF},
	} {
		next.send()
		time.Sleep(20 * time.Millisecond)
		_ = local.SetReadDeadline(time.Now().Add(budget.Of(10 * time.Second)))
		start := time.Now()
		n, kicked, err := s.Answer([]byte("a!"), buf, true)
		if string(buf[:n]) != next.want || !errors.Is(err, next.err) {
			t.Fatalf("%s: %q %v, want %q %v", next.name, buf[:n], err, next.want, next.err)
		}
		if !kicked {
			t.Errorf("%s: read after %v without the timer (kicked false)", next.name, time.Since(start))
		}
		if _, err := io.ReadFull(peer, a[:]); err != nil || string(a[:]) != "a!" {
			t.Fatalf("%s: the answer: %q %v", next.name, a, err)
		}
	}
}

// An answer sent past the read deadline still leaves; the read then
// reports the deadline.
func TestAnswerPastItsDeadline(t *testing.T) {
	local, peer := proctest.TCPPair(t)
	s := New(local)
	defer s.Stop()
	_ = local.SetReadDeadline(time.Unix(1, 0))
	n, _, err := s.Answer([]byte("late"), make([]byte, 16), true)
	if !errors.Is(err, os.ErrDeadlineExceeded) || n != 0 {
		t.Fatalf("Answer: %d %v, want a deadline error", n, err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(budget.Of(10 * time.Second)))
	b := make([]byte, 4)
	if _, err := io.ReadFull(peer, b); err != nil || string(b) != "late" {
		t.Fatalf("peer got %q %v", b, err)
	}
}
