package framefront

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
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
