// Package netpeek tells, without waiting and without taking any byte,
// whether a TCP socket's peer has ended the connection: its end of the
// stream (FIN) or an error (RST) is next, and no data before it. The
// HTTP/2 connections and the REST front's HTTP/1.1 server ask it. It
// imports nothing of the module.
package netpeek

import "syscall"

// Ended peeks at the socket behind rc.
func Ended(rc syscall.RawConn) bool {
	ended := false
	err := rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ended = err == nil && n == 0 || err != nil && err != syscall.EAGAIN && err != syscall.EINTR
	})
	return ended || err != nil
}
