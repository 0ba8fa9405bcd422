// Package linktest is a TCP link a test puts between a client and a
// server to fail the network between them: silenced, its connections stay
// open and carry nothing (a half-open connection, as a NAT or firewall
// that forgot it leaves one, or a request a server lost unanswered); cut,
// they close and new ones are refused (a partition, at once).
package linktest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Link relays TCP connections to a target.
type Link struct {
	ln     net.Listener
	target string
	// gen is the relay's generation: a connection carries traffic while
	// the generation is the one it was accepted in (-1: accepted silent).
	gen    atomic.Int64
	silent atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	isCut bool // a connection accepted as the cut came is dropped too
	wg    sync.WaitGroup
}

// Start listens on a free 127.0.0.1 port and relays to target until the
// test ends (it is cut then).
func Start(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{ln: ln, target: target}
	l.wg.Go(l.accept)
	t.Cleanup(l.Cut)
	return l
}

// Addr is where to connect through the link (HOST:PORT).
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Silence lets nothing more through the connections open, and nothing
// through new ones, without closing any.
func (l *Link) Silence() { l.silent.Store(true); l.gen.Add(1) }

// Pass lets new connections through again; those silenced stay silent.
func (l *Link) Pass() { l.silent.Store(false); l.gen.Add(1) }

// Cut closes every connection and refuses new ones; safe twice.
func (l *Link) Cut() {
	l.ln.Close()
	l.mu.Lock()
	l.isCut = true
	for _, c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}

func (l *Link) accept() {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return
		}
		gen := l.gen.Load()
		if l.silent.Load() {
			gen = -1
		}
		out, err := net.Dial("tcp", l.target)
		if err != nil {
			in.Close()
			continue
		}
		l.mu.Lock()
		if l.isCut {
			l.mu.Unlock()
			in.Close()
			out.Close()
			continue
		}
		l.conns = append(l.conns, in, out)
		l.mu.Unlock()
		for _, dir := range [][2]net.Conn{{in, out}, {out, in}} {
			l.wg.Go(func() {
				_, _ = io.Copy(genWriter{l, gen, dir[0]}, dir[1])
				in.Close()
				out.Close()
			})
		}
	}
}

// genWriter writes while the link's generation is gen, and swallows
// what comes after.
type genWriter struct {
	l   *Link
	gen int64
	dst net.Conn
}

func (w genWriter) Write(p []byte) (int, error) {
	if w.l.gen.Load() != w.gen {
		return len(p), nil
	}
	return w.dst.Write(p)
}
