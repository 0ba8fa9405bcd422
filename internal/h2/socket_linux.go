//go:build linux

package h2

import (
	"io"
	"net"
	"os"
	"syscall"
)

// rawSocket reads and writes a plain TCP connection with raw system
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
type rawSocket struct {
	rc syscall.RawConn

	rbuf   []byte
	rn     int
	rerrno syscall.Errno
	readFn func(fd uintptr) bool

	iov     [3]syscall.Iovec
	wbufs   [3][]byte
	wn      int
	wwait   bool // write waits for room; tryWrite does not
	werrno  syscall.Errno
	writeFn func(fd uintptr) bool
}

func newRawSocket(nc net.Conn) *rawSocket {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawSocket{rc: rc}
	r.readFn = r.read
	r.writeFn = r.write1
	return r
}

// Read is io.Reader's: it waits in the poller for data, and for a
// deadline set on the connection.
func (r *rawSocket) Read(p []byte) (int, error) {
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

func (r *rawSocket) read(fd uintptr) bool {
	for {
		r.rn, r.rerrno = sysRead(fd, r.rbuf)
		switch r.rerrno {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true
	}
}

// tryWrite sends what the socket takes now of bufs (at most three), in
// order, in one system call, and reports how much that was.
func (r *rawSocket) tryWrite(bufs ...[]byte) (int, error) {
	return r.send(false, bufs...)
}

// write sends a and then b (either may be empty), waiting in the poller
// while the socket's buffer is full.
func (r *rawSocket) write(a, b []byte) error {
	_, err := r.send(true, a, b)
	return err
}

func (r *rawSocket) send(wait bool, bufs ...[]byte) (int, error) {
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
func (r *rawSocket) write1(fd uintptr) bool {
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

func (r *rawSocket) writev(fd uintptr) (int, syscall.Errno) {
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
