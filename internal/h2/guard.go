package h2

import (
	"bytes"
	"errors"
	"io"
	"net"
	"time"

	"golang.org/x/net/http2"
)

// A server's guards against a client that would take it down: a
// handshake that must end in time, a budget of streams reset before
// they were answered, and an end to connections left idle. Each one that
// cuts a client off says so once, through Config.CutOff.

var errHandshake = errors.New("h2: the client sent no preface and SETTINGS within the handshake timeout")

// checkHandshake runs on the handshake timer: a client that has not
// finished its handshake by now is cut off.
func (c *Conn) checkHandshake() {
	if c.handshook.Load() {
		return
	}
	c.cut(CutHandshake)
	c.fail(errHandshake)
}

// checkIdle runs on the idle timer: a connection that had no stream
// open, and opened or closed none, since the timer's last look goes
// away.
func (c *Conn) checkIdle() {
	c.mu.Lock()
	if c.closed || c.goingAway {
		c.mu.Unlock()
		return
	}
	idle := len(c.streams) == 0 && c.streamEvents == c.idleSeen
	c.idleSeen = c.streamEvents
	if !idle {
		c.idle.Reset(c.cfg.IdleTimeout)
	}
	c.mu.Unlock()
	if idle {
		c.GoAway()
	}
}

// spendResetLocked takes a peer's reset of a stream this side had not
// answered from the budget; false: the budget is spent.
func (c *Conn) spendResetLocked(s *Stream) bool {
	if !c.server || c.cfg.ResetBudget <= 0 || s.sentEnd {
		return true
	}
	c.refillLocked()
	c.resetTokens--
	return c.resetTokens >= 0
}

// earnResetLocked gives one back for a stream that completed.
func (c *Conn) earnResetLocked() {
	if c.server && c.cfg.ResetBudget > 0 && c.resetTokens < float64(c.cfg.ResetBudget) {
		c.resetTokens++
	}
}

func (c *Conn) refillLocked() {
	now := time.Now()
	budget := float64(c.cfg.ResetBudget)
	c.resetTokens = min(budget, c.resetTokens+budget*now.Sub(c.resetAt).Seconds()/resetRefill.Seconds())
	c.resetAt = now
}

// resetsSpent ends the connection of a peer over its reset budget.
func (c *Conn) resetsSpent() error {
	c.cut(CutResets)
	return c.connError(http2.ErrCodeEnhanceYourCalm, "too many streams reset before they were answered")
}

func (c *Conn) cut(why CutOff) {
	c.cutting.Store(true)
	if c.cfg.CutOff != nil {
		c.cutOff.Do(func() { c.cfg.CutOff(why) })
	}
}

// Refuse tells a client that this server will not serve its connection
// (its SETTINGS, then GOAWAY with code and why) and closes it. It takes
// refuseTime at most, whatever the client does.
func Refuse(nc net.Conn, code http2.ErrCode, why string) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(refuseTime))
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteGoAway(0, code, []byte(why))
	if _, err := nc.Write(b.Bytes()); err != nil {
		return
	}
	// Closing with the client's preface unread would reset the
	// connection and lose the GOAWAY.
	if hc, ok := nc.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, nc)
}

const refuseTime = 250 * time.Millisecond
