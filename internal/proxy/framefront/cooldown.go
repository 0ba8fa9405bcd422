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
