package route

import (
	"cmp"
	"fmt"
	"time"
)

// ClientLimits hold the front's client connections to what a proxy in
// front of production clusters can keep: a client that opens and resets
// streams in a loop, connects and says nothing, or opens connections
// without end is cut off, and the cut counted
// (shardctl_proxy_clients_cut_off_total). Zero values take the defaults;
// a negative one turns that limit off.
type ClientLimits struct {
	// MaxConns is the most client connections served at once; one past
	// it is told so (GOAWAY) and closed.
	MaxConns int
	// HandshakeTimeout: a connection's TLS handshake, HTTP/2 preface and
	// first SETTINGS must come within it.
	HandshakeTimeout time.Duration
	// IdleTimeout: a connection with no call for this long is sent
	// GOAWAY (its client reconnects when it has a call to make).
	IdleTimeout time.Duration
	// KeepAlive: a connection quiet for this long is pinged, and closed
	// if the ping goes unanswered for 20 s: a client gone without a word
	// holds nothing for long.
	KeepAlive time.Duration
	// ResetBudget is how many more calls a connection may cancel before
	// their answer than it lets complete (refilled over 10 s): past it,
	// GOAWAY ENHANCE_YOUR_CALM.
	ResetBudget int
	// Cooldown: after a connection is cut off for its conduct (resets,
	// no handshake), new connections from its address are held a second
	// unanswered and closed, for this long; those already served go on.
	Cooldown time.Duration
	// OutputLimit is how many bytes of answers a connection may have
	// waiting, for the socket or for the client's flow-control window:
	// past it, its new calls are refused (REFUSED_STREAM, safe to retry)
	// until it reads. A client that asks and never reads holds no more.
	OutputLimit int
}

// Client limit defaults: kept by a real deployment. A Zeebe client makes
// one connection and keeps it; its calls complete far more often than it
// cancels them.
const (
	DefaultMaxClientConns         = 10000
	DefaultClientHandshakeTimeout = 10 * time.Second
	DefaultClientIdleTimeout      = time.Hour
	DefaultClientKeepAlive        = time.Minute
	DefaultClientResetBudget      = 200
	DefaultClientCooldown         = 10 * time.Second
	DefaultClientOutputLimit      = 4 << 20
)

func (l *ClientLimits) validate() error {
	l.HandshakeTimeout = cmp.Or(l.HandshakeTimeout, DefaultClientHandshakeTimeout)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, DefaultClientIdleTimeout)
	l.KeepAlive = cmp.Or(l.KeepAlive, DefaultClientKeepAlive)
	l.Cooldown = cmp.Or(l.Cooldown, DefaultClientCooldown)
	l.MaxConns = cmp.Or(l.MaxConns, DefaultMaxClientConns)
	l.ResetBudget = cmp.Or(l.ResetBudget, DefaultClientResetBudget)
	l.OutputLimit = cmp.Or(l.OutputLimit, DefaultClientOutputLimit)
	if l.KeepAlive > 0 && l.KeepAlive < 10*time.Second {
		return fmt.Errorf("client keepalive %v: want at least 10s (or negative: none)", l.KeepAlive)
	}
	return nil
}
