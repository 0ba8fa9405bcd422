// Package rawsock reads and writes a plain TCP connection on Linux with
// raw system calls, waiting in Go's poller only when the socket is not
// ready, and skips the read that would only learn the socket is empty
// where the poller can be trusted to say so (Socket.ReadEach), or where
// the peer speaks only when answered (Socket.Answer). The
// HTTP/2 connections and the REST front's HTTP/1.1 server use it on
// their hot paths; New returns nil for any other connection (TLS, a
// pipe, another platform), which then goes through net.Conn.
// It imports nothing of the module but internal/netpeek.
package rawsock
