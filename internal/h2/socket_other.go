//go:build !linux

package h2

import "net"

// rawSocket is Linux's; elsewhere connections use net.Conn's reads and
// writes.
type rawSocket struct{}

func newRawSocket(net.Conn) *rawSocket { return nil }

func (*rawSocket) Read([]byte) (int, error) { panic("h2: no raw socket on this platform") }

func (*rawSocket) write(_, _ []byte) error { panic("h2: no raw socket on this platform") }

func (*rawSocket) tryWrite(...[]byte) (int, error) { panic("h2: no raw socket on this platform") }

func (*rawSocket) readInto(func() []byte, func(int) bool) {}

func (*rawSocket) readEach() error { panic("h2: no raw socket on this platform") }

func (*rawSocket) shutdown() { panic("h2: no raw socket on this platform") }

func (*rawSocket) stop() {}
