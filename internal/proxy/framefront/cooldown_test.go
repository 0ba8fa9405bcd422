package framefront

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

// An address cooling down holds until its end and is then forgotten; a
// longer cut extends it, a shorter one does not; past the cap the
// address whose cool-down ended first goes.
func TestCooldowns(t *testing.T) {
	var c cooldowns
	now := time.Unix(1_000_000, 0)
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	c.start(a, now, 10*time.Second)
	for _, tc := range []struct {
		addr  netip.Addr
		after time.Duration
		holds bool
	}{
		{a, 0, true},
		{a, 9 * time.Second, true},
		{b, time.Second, false},
		{a, 10 * time.Second, false},
	} {
		if got := c.holds(tc.addr, now.Add(tc.after)); got != tc.holds {
			t.Errorf("%v after %v: holds %v, want %v", tc.addr, tc.after, got, tc.holds)
		}
	}
	c.start(a, now, 10*time.Second)
	c.start(a, now, time.Second)
	if !c.holds(a, now.Add(5*time.Second)) {
		t.Error("a shorter cut ended a longer cool-down")
	}
	for i := range maxCooldowns + 10 {
		c.start(netip.MustParseAddr(fmt.Sprintf("10.1.%d.%d", i/256, i%256)), now, time.Duration(i+20)*time.Second)
	}
	if n := len(c.until); n > maxCooldowns {
		t.Errorf("%d addresses remembered: want at most %d", n, maxCooldowns)
	}
}

// The tarpit holds connections until tarpitHold, up to maxHeld of them;
// Close closes those it holds at once and takes no more, and is safe
// twice.
func TestTarpit(t *testing.T) {
	var tp tarpit
	defer tp.Close()
	ends := func(peer net.Conn, within time.Duration) bool {
		_ = peer.SetReadDeadline(time.Now().Add(within))
		_, err := peer.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}
	nc, peer := net.Pipe()
	start := time.Now()
	if !tp.hold(nc) {
		t.Fatal("an empty tarpit refused a connection")
	}
	if ends(peer, tarpitHold/2) {
		t.Fatal("a held connection closed before its time")
	}
	if !ends(peer, budget.Of(5*time.Second)) {
		t.Fatal("a held connection was not closed")
	}
	if took := time.Since(start); took < tarpitHold {
		t.Errorf("held for %v: want %v", took, tarpitHold)
	}

	peers := make([]net.Conn, 0, maxHeld)
	for range maxHeld {
		nc, peer := net.Pipe()
		if !tp.hold(nc) {
			t.Fatalf("refused with %d held: want %d held", len(peers), maxHeld)
		}
		peers = append(peers, peer)
	}
	extra, _ := net.Pipe()
	if tp.hold(extra) {
		t.Errorf("took one past %d held", maxHeld)
	}
	tp.Close()
	tp.Close()
	for i, peer := range peers {
		if !ends(peer, time.Second) {
			t.Fatalf("held connection %d still open after Close", i)
		}
	}
	if tp.hold(extra) {
		t.Error("a closed tarpit took a connection")
	}
}
