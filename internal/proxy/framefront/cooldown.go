package framefront

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// cooldowns are the client addresses a connection was cut off from for
// its conduct (too many resets, no handshake), each until a time: a new
// connection from one is closed at once, so that an attacker who dials
// again gets nothing processed, while the connections already served
// from that address (a NAT's other clients) go on.
type cooldowns struct {
	mu    sync.Mutex
	until map[netip.Addr]time.Time
}

// maxCooldowns bounds the addresses remembered: past it, those whose
// cool-down ended are forgotten first, then the soonest to end.
const maxCooldowns = 4096

// start cools addr down for d from now, or longer if it already was.
func (c *cooldowns) start(addr netip.Addr, now time.Time, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil {
		c.until = map[netip.Addr]time.Time{}
	}
	if len(c.until) >= maxCooldowns {
		c.forgetLocked(now)
	}
	if end := now.Add(d); end.After(c.until[addr]) {
		c.until[addr] = end
	}
}

// holds reports whether addr is cooling down at now.
func (c *cooldowns) holds(addr netip.Addr, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.until[addr]
	if ok && !now.Before(until) {
		delete(c.until, addr)
		return false
	}
	return ok
}

func (c *cooldowns) forgetLocked(now time.Time) {
	var soonest netip.Addr
	for a, until := range c.until {
		if !now.Before(until) {
			delete(c.until, a)
		} else if !soonest.IsValid() || until.Before(c.until[soonest]) {
			soonest = a
		}
	}
	if len(c.until) >= maxCooldowns {
		delete(c.until, soonest)
	}
}

// remoteAddr is a connection's client address (not valid for one that
// is not TCP).
func remoteAddr(nc net.Conn) netip.Addr {
	if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// tarpit holds connections from addresses cooling down, unread, for a
// moment before closing them. Closing one at once lets an attacker dial
// again at once, thousands of times a second, and every accept and close
// is the proxy's CPU; held, its writes fill the socket's buffers and it
// waits. At most maxHeld are held; past that one is closed at once.
type tarpit struct {
	mu     sync.Mutex
	held   map[net.Conn]*time.Timer
	closed bool
	wg     sync.WaitGroup // one for each connection held
}

const (
	tarpitHold = time.Second
	maxHeld    = 256
)

// hold closes nc after tarpitHold, or reports false (nc untouched) when
// the tarpit is full or closed.
func (t *tarpit) hold(nc net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.held) >= maxHeld {
		return false
	}
	if t.held == nil {
		t.held = map[net.Conn]*time.Timer{}
	}
	t.wg.Add(1)
	t.held[nc] = time.AfterFunc(tarpitHold, func() { t.release(nc) })
	return true
}

func (t *tarpit) release(nc net.Conn) {
	t.mu.Lock()
	_, ok := t.held[nc]
	delete(t.held, nc)
	t.mu.Unlock()
	if ok {
		_ = nc.Close()
		t.wg.Done()
	}
}

// Close closes every connection held and takes no more; safe twice.
func (t *tarpit) Close() {
	t.mu.Lock()
	t.closed = true
	held := t.held
	t.held = nil
	t.mu.Unlock()
	for nc, timer := range held {
		timer.Stop()
		_ = nc.Close()
		t.wg.Done()
	}
	t.wg.Wait()
}
