//go:build linux && race

package rawsock

import "syscall"

// Under the race detector the socket goes through syscall.Read and
// syscall.Write, which tell the detector that what one goroutine wrote
// to a socket happened before what another read from it: raw system
// calls would hide that, and every test whose goroutines meet only
// through a connection would report races that are not there.

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return max(n, 0), errno(err)
}

func sysWritev(fd uintptr, _ []syscall.Iovec, bufs [][]byte) (int, syscall.Errno) {
	total := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		n, err := syscall.Write(int(fd), b)
		total += max(n, 0)
		if err != nil {
			if total > 0 {
				return total, 0
			}
			return 0, errno(err)
		}
		if n < len(b) {
			break
		}
	}
	return total, 0
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
