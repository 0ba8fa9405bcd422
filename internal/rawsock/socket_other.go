//go:build !linux

package rawsock

import "net"

// Socket is Linux's; elsewhere New returns nil and connections use
// net.Conn's reads and writes.
type Socket struct{}

// New returns nil: there is no raw socket on this platform.
func New(net.Conn) *Socket { return nil }

func (*Socket) Read([]byte) (int, error) { panic("rawsock: no raw socket on this platform") }

func (*Socket) Write(_, _ []byte) error { panic("rawsock: no raw socket on this platform") }

func (*Socket) TryWrite(...[]byte) (int, error) { panic("rawsock: no raw socket on this platform") }

func (*Socket) ReadInto(func() []byte, func(int) bool) {}

func (*Socket) ReadEach() error { panic("rawsock: no raw socket on this platform") }

func (*Socket) Shutdown() { panic("rawsock: no raw socket on this platform") }

func (*Socket) EmptyReads() int64 { return 0 }

func (*Socket) Stop() {}

func (*Socket) Answer(_, _ []byte, _ bool) (int, bool, error) {
	panic("rawsock: no raw socket on this platform")
}
