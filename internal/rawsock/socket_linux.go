//go:build linux

package rawsock

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shardctl/shardctl/internal/netpeek"
)

// Socket reads and writes a plain TCP connection with raw system
// calls on its non-blocking descriptor, and waits in Go's poller only
// when the socket is not ready. A read or write through net.Conn enters
// the scheduler's syscall state, which wakes the runtime's monitor
// thread whenever the process was idle, and lets the monitor hand the
// goroutine's P to another thread when a loopback write (which delivers
// to the receiver on the way) runs long; at a few thousand small calls
// a second those wake-ups cost the proxy more than its own work.
// Neither call can block here: the descriptor is non-blocking.
//
// One goroutine reads at a time (the connection's reader), and one
// writes (the one that is busy); the callbacks the poller calls are
// made once, with their arguments and results in the socket, so that a
// call allocates nothing.
type Socket struct {
	rc syscall.RawConn

	rbuf   []byte
	rn     int
	rerrno syscall.Errno
	readFn func(fd uintptr) bool

	// ReadEach's: where the bytes go and who hears of them, and whether
	// the last read emptied the socket.
	space      func() []byte
	got        func(n int) bool
	drained    bool
	eof        bool
	readEachFn func(fd uintptr) bool
	// empty counts reads that found nothing: each is a system call
	// spent to learn that the poller must wait, which ReadEach avoids
	// where it can (a test watches it).
	empty atomic.Int64

	// The poller reports what comes after a read began, so a wait
	// entered after a short read (not after the empty read) hears of
	// new data, a new FIN or a new RST, but not of a FIN or RST that
	// came with the data read: nothing would ever wake it. A timer
	// therefore looks at a skipped wait that lasts a whole period (one
	// peek at the socket, once per wait), and wakes the reader of a
	// peer found gone. Under load waits are short and are not looked
	// at; an idle connection costs one peek, the read it skipped.
	waits    uint64        // skipped waits begun (the reader's)
	waiting  atomic.Uint64 // the skipped wait under way (its number; 0: none)
	check    *time.Timer
	checking atomic.Bool   // check is set
	seen     atomic.Uint64 // the wait the timer saw last (the timer's)

	// Answer's: the reply a peer cannot send before it has the answer
	// is waited for from before the answer is written (see Answer).
	answering  bool // the answer is not out yet
	answerWait bool // after it, wait before reading
	answerFn   func(fd uintptr) bool
	// answers: the skipped waits are Answer's (a socket's reader uses
	// Answer or ReadEach, not both), which the timer ends through the
	// read deadline rather than by shutting the socket.
	answers atomic.Bool
	kickMu  sync.Mutex
	kicked  bool // the timer ended Answer's wait with the read deadline
	nc      net.Conn

	iov     [3]syscall.Iovec
	wbufs   [3][]byte
	wn      int
	wwait   bool // write waits for room; TryWrite does not
	werrno  syscall.Errno
	writeFn func(fd uintptr) bool
}

func New(nc net.Conn) *Socket {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &Socket{rc: rc, nc: nc}
	r.readFn = r.read
	r.answerFn = r.answer
	r.readEachFn = r.readMany
	r.writeFn = r.write1
	return r
}

// ReadInto sets where ReadEach reads to (space) and who hears of each
// read's count (got), once: a method value made per call would be an
// allocation per call. It also makes the timer that looks at ReadEach's
// skipped waits, which a socket read only with Read does not need.
func (r *Socket) ReadInto(space func() []byte, got func(n int) bool) {
	r.space, r.got = space, got
	r.makeCheck()
}

func (r *Socket) makeCheck() {
	if r.check == nil {
		r.check = time.AfterFunc(time.Hour, r.lookAtWait)
		r.check.Stop()
	}
}

// ReadEach reads into the buffers space gives and hands each read's
// count to got, until got returns false, all in one wait in the poller.
// A read that leaves the socket empty (fewer bytes than asked) is
// followed by a wait for more, not by a read that would find nothing:
// Go's poller forgets what it saw each time a read starts, so only
// inside one such read may the next system call be skipped. got must
// not wait, and must not close the connection (closing waits for the
// read to end): it runs while the read holds the socket.
func (r *Socket) ReadEach() error {
	r.drained, r.eof, r.rerrno = false, false, 0
	err := r.rc.Read(r.readEachFn)
	r.waiting.Store(0) // a wait a deadline or a close ended
	switch {
	case err != nil:
		return err
	case r.rerrno != 0:
		return os.NewSyscallError("read", r.rerrno)
	case r.eof:
		return io.EOF
	}
	return nil
}

func (r *Socket) readMany(fd uintptr) bool {
	if r.waiting.Load() != 0 {
		r.waiting.Store(0)
	}
	for {
		if r.drained {
			r.drained = false
			r.skipRead()
			return false // wait for more
		}
		p := r.space()
		if len(p) == 0 {
			return true
		}
		n, errno := sysRead(fd, p)
		switch errno {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			r.empty.Add(1)
			return false
		default:
			r.rerrno = errno
			return true
		}
		if n == 0 {
			r.eof = true
			return true
		}
		r.drained = n < len(p)
		if !r.got(n) {
			return true
		}
	}
}

// skipRead marks a wait entered without the read that would only have
// found the socket empty, for the timer to look at.
func (r *Socket) skipRead() {
	r.waits++
	r.waiting.Store(r.waits)
	if r.checking.CompareAndSwap(false, true) {
		r.check.Reset(waitCheckPeriod)
	}
}

// waitCheckPeriod: how long a skipped wait lasts before its socket is
// looked at; a peer that left right behind its last frames is noticed
// within two.
const waitCheckPeriod = 200 * time.Millisecond

// lookAtWait is the timer's: it peeks at the socket of a skipped wait
// it saw a period ago too, and sets itself again while waits go on.
func (r *Socket) lookAtWait() {
	w := r.waiting.Load()
	switch {
	case w != 0 && w == r.seen.Load() && r.answers.Load():
		r.kickAnswer(w)
	case w != 0 && w == r.seen.Load():
		r.peek() // this wait is looked at: only a later one needs the timer
	case w != 0:
		r.seen.Store(w)
		r.check.Reset(waitCheckPeriod)
		return
	}
	r.checking.Store(false)
	// A wait begun just before the store found the timer set: set it
	// for that one.
	if now := r.waiting.Load(); now != 0 && now != w && r.checking.CompareAndSwap(false, true) {
		r.check.Reset(waitCheckPeriod)
	}
}

// peek wakes the reader when the socket holds an end (FIN) or an error
// (RST) and nothing else: data would have woken it already. Shutting
// the reading side down wakes it, and it reads what the peer left.
func (r *Socket) peek() {
	if netpeek.Ended(r.rc) {
		_ = r.rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RD) })
	}
}

// Answer writes answer and then reads the peer's next message into p,
// both within one read of the socket, so that the read is waiting in the
// poller before the answer leaves: a peer that speaks only when answered
// (an HTTP/1.1 client that does not pipeline) is then heard without the
// read that would find the socket empty first, a system call per
// exchange (see ReadEach for why that read is needed elsewhere). With
// drained false (bytes may be left from the last read) the read is made
// at once, as Read's. An answer the socket does not take whole is
// finished by Write before the read.
//
// What the peer sent after the last read and before Answer began
// (pipelined requests, a FIN) wakes no one: the timer looks at a wait
// that lasts a whole period, and when the socket holds anything it ends
// the wait through the connection's read deadline, after which Answer
// reads at once. kicked then says the deadline was moved: the caller
// sets its own again.
func (r *Socket) Answer(answer, p []byte, drained bool) (n int, kicked bool, err error) {
	if len(p) == 0 {
		return 0, false, io.ErrShortBuffer
	}
	if r.check == nil {
		r.answers.Store(true)
		r.makeCheck()
	}
	r.wbufs = [3][]byte{answer}
	r.wn, r.wwait, r.werrno = 0, false, 0
	r.rbuf, r.rn, r.rerrno = p, 0, 0
	r.answering, r.answerWait = true, drained
	err = r.rc.Read(r.answerFn)
	r.kickMu.Lock()
	r.waiting.Store(0)
	kicked, r.kicked = r.kicked, false
	r.kickMu.Unlock()
	left := r.wbufs[0]
	n, rerrno, werrno := r.rn, r.rerrno, r.werrno
	r.wbufs, r.iov, r.rbuf = [3][]byte{}, [3]syscall.Iovec{}, nil
	switch {
	case werrno != 0 && werrno != syscall.EAGAIN:
		return 0, kicked, os.NewSyscallError("writev", werrno)
	case r.answering && err != nil && !errors.Is(err, os.ErrDeadlineExceeded):
		return 0, kicked, err
	case r.answering:
		// The socket took part of the answer, or the deadline had passed
		// before the answer left (a closing server moves it to end the
		// wait after the answer): the rest leaves now.
		if werr := r.Write(left, nil); werr != nil {
			return 0, kicked, werr
		}
		if err != nil {
			return 0, kicked, err
		}
		return r.readKicked(p, kicked)
	case err != nil && kicked && errors.Is(err, os.ErrDeadlineExceeded):
		return r.readKicked(p, kicked)
	case err != nil:
		return 0, kicked, err
	case rerrno != 0:
		return 0, kicked, os.NewSyscallError("read", rerrno)
	case n == 0:
		return 0, kicked, io.EOF
	}
	return n, kicked, nil
}

// readKicked reads once the answer is out; a read after the timer moved
// the deadline would only time out, so the deadline is cleared for it
// and the caller sets its own again (kicked).
func (r *Socket) readKicked(p []byte, kicked bool) (int, bool, error) {
	if kicked {
		_ = r.nc.SetReadDeadline(time.Time{})
	}
	n, err := r.Read(p)
	return n, kicked, err
}

func (r *Socket) answer(fd uintptr) bool {
	if r.answering {
		for len(r.wbufs[0]) > 0 {
			n, e := r.writev(fd)
			if e == syscall.EINTR {
				continue
			}
			if e != 0 {
				r.werrno = e
				return true
			}
			r.wbufs[0] = r.wbufs[0][n:]
		}
		r.answering = false
		if r.answerWait {
			r.answerWait = false
			r.skipRead()
			return false
		}
	}
	if r.waiting.Load() != 0 {
		r.waiting.Store(0)
	}
	return r.read(fd)
}

// kickAnswer ends Answer's wait w, which lasted a period, when the
// socket holds something the poller will not report (see Answer).
func (r *Socket) kickAnswer(w uint64) {
	if !netpeek.Pending(r.rc) {
		return
	}
	r.kickMu.Lock()
	defer r.kickMu.Unlock()
	if r.waiting.Load() == w {
		r.kicked = true
		_ = r.nc.SetReadDeadline(Expired)
	}
}

// EmptyReads is how many reads found the socket empty.
func (r *Socket) EmptyReads() int64 { return r.empty.Load() }

// Stop ends the timer of skipped waits (made by ReadInto or Answer), once
// the connection has.
func (r *Socket) Stop() {
	if r.check != nil {
		r.check.Stop()
	}
}

// Shutdown ends both directions of the socket without closing it: a
// read or write under way returns at once, where a close would wait
// for a read that holds the socket (ReadEach) to end.
func (r *Socket) Shutdown() {
	_ = r.rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
}

// Read is io.Reader's: it waits in the poller for data, and for a
// deadline set on the connection.
func (r *Socket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rbuf = p
	err := r.rc.Read(r.readFn)
	n, errno := r.rn, r.rerrno
	r.rbuf = nil
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *Socket) read(fd uintptr) bool {
	for {
		r.rn, r.rerrno = sysRead(fd, r.rbuf)
		switch r.rerrno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			r.empty.Add(1)
			return false
		}
		return true
	}
}

// TryWrite sends what the socket takes now of bufs (at most three), in
// order, in one system call, and reports how much that was.
func (r *Socket) TryWrite(bufs ...[]byte) (int, error) {
	return r.send(false, bufs...)
}

// Write sends a and then b (either may be empty), waiting in the poller
// while the socket's buffer is full.
func (r *Socket) Write(a, b []byte) error {
	_, err := r.send(true, a, b)
	return err
}

func (r *Socket) send(wait bool, bufs ...[]byte) (int, error) {
	r.wbufs = [3][]byte{}
	copy(r.wbufs[:], bufs)
	r.wn, r.wwait, r.werrno = 0, wait, 0
	err := r.rc.Write(r.writeFn)
	n, errno := r.wn, r.werrno
	r.wbufs, r.iov = [3][]byte{}, [3]syscall.Iovec{} // keep no buffer alive
	switch {
	case err != nil:
		return n, err
	case errno == syscall.EAGAIN:
		return n, nil
	case errno != 0:
		return n, os.NewSyscallError("writev", errno)
	}
	return n, nil
}

// write1 writes what is left of wbufs: once, or (wwait) until all is
// out, asking the poller to wait when the socket is full.
func (r *Socket) write1(fd uintptr) bool {
	for {
		left := 0
		for _, b := range r.wbufs {
			left += len(b)
		}
		if left == 0 {
			return true
		}
		n, e := r.writev(fd)
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if r.wwait {
				return false
			}
			r.werrno = e
			return true
		default:
			r.werrno = e
			return true
		}
		r.wn += n
		for i := range r.wbufs {
			k := min(n, len(r.wbufs[i]))
			r.wbufs[i] = r.wbufs[i][k:]
			n -= k
		}
		if !r.wwait {
			return true
		}
	}
}

func (r *Socket) writev(fd uintptr) (int, syscall.Errno) {
	iov := r.iov[:0]
	for _, p := range r.wbufs {
		if len(p) > 0 {
			v := syscall.Iovec{Base: &p[0]}
			v.SetLen(len(p))
			iov = append(iov, v)
		}
	}
	return sysWritev(fd, iov, r.wbufs[:])
}
