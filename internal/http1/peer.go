package http1

import (
	"crypto/tls"
	"net"
	"syscall"

	"github.com/shardctl/shardctl/internal/netpeek"
)

// peerClosed reports whether the client has closed its end, without
// waiting. Bytes waiting (a pipelined request, TLS records) count as a
// client still there.
func peerClosed(nc net.Conn) bool {
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	return err != nil || netpeek.Ended(rc)
}
