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
type rawSocket struct {
	rc  syscall.RawConn
	iov [3]syscall.Iovec
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
	return &rawSocket{rc: rc}
}

// Read is io.Reader's: it waits in the poller for data, and for a
// deadline set on the connection.
func (r *rawSocket) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			n, errno = sysRead(fd, p)
			switch errno {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			return true
		}
	})
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

// tryWrite sends what the socket takes now of bufs, in order, in one
// system call, and reports how much that was.
func (r *rawSocket) tryWrite(bufs ...[]byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for {
			n, errno = r.writev(fd, bufs...)
			if errno != syscall.EINTR {
				return true
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, nil
	case errno != 0:
		return 0, os.NewSyscallError("writev", errno)
	}
	return n, nil
}

// write sends a and then b (either may be empty), waiting in the poller
// while the socket's buffer is full.
func (r *rawSocket) write(a, b []byte) error {
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for len(a)+len(b) > 0 {
			n, e := r.writev(fd, a, b)
			switch e {
			case 0:
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
			k := min(n, len(a))
			a, b = a[k:], b[n-k:]
		}
		return true
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return os.NewSyscallError("writev", errno)
	}
	return nil
}

func (r *rawSocket) writev(fd uintptr, bufs ...[]byte) (int, syscall.Errno) {
	iov := r.iov[:0]
	for _, p := range bufs {
		if len(p) > 0 {
			v := syscall.Iovec{Base: &p[0]}
			v.SetLen(len(p))
			iov = append(iov, v)
		}
	}
	if len(iov) == 0 {
		return 0, 0
	}
	return sysWritev(fd, iov, bufs)
}
