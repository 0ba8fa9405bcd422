// Package netpeek tells, without waiting and without taking any byte,
// whether a TCP socket's peer has ended the connection: its end of the
// stream (FIN) or an error (RST) is next, and no data before it; and
// whether it holds anything a read would return. The
// HTTP/2 connections and the REST front's HTTP/1.1 server ask it. It
// imports nothing of the module.
package netpeek

import "syscall"

// Ended peeks at the socket behind rc.
func Ended(rc syscall.RawConn) bool {
	n, errno, err := peek(rc)
	return err != nil || errno == 0 && n == 0 || errno != 0 && errno != syscall.EAGAIN && errno != syscall.EINTR
}

// Pending peeks at the socket behind rc: whether a read would return at
// once, with data, the end of the stream or an error.
func Pending(rc syscall.RawConn) bool {
	_, errno, err := peek(rc)
	return err != nil || errno != syscall.EAGAIN && errno != syscall.EINTR
}

func peek(rc syscall.RawConn) (n int, errno syscall.Errno, err error) {
	err = rc.Control(func(fd uintptr) {
		var b [1]byte
		var e error
		n, _, e = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if e != nil {
			errno, _ = e.(syscall.Errno)
			if errno == 0 {
				errno = syscall.EIO
			}
		}
	})
	return n, errno, err
}
