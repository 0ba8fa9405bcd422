//go:build long

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
)

// The demo's story as a user watches it: `shardctl demo --scenario
// monolith` on a terminal shows the gateway to point a client at and what
// the scenario does; the lone cluster is critical within a minute of the
// load passing its knee; quitting leaves one readable line of what the
// load did, no Go struct and no client log lines.
func TestDemoMonolithOnATerminal(t *testing.T) {
	t.Parallel()
	tm := proctest.StartTerminal(t, bin, baseEnv(), 160, 30, "demo", "--scenario", "monolith", "--listen", "127.0.0.1:0")
	tm.WaitFor(t, 60*time.Second, "gateway 127.0.0.1:", "SHARD", "shard-1", "REF", "scenario: ")
	// One partition at 300 records/s completes at most ~72 one-task
	// instances/s: 80/s offered is past its knee.
	tm.WaitFor(t, 90*time.Second, "load raised to 80 instances/s")
	passed := time.Now()
	screen := tm.WaitFor(t, 2*time.Minute, "✖ crit")
	took := time.Since(passed)
	t.Logf("critical %v after the load passed the knee:\n%s", took.Round(time.Second), screen)
	if limit := budget.Of(time.Minute); took > limit {
		t.Errorf("critical %v after the load passed the knee, want within %v", took.Round(time.Second), limit.Round(time.Second))
	}
	if !strings.Contains(screen, "proxy refused 0% of new instances") {
		t.Errorf("the screen does not say what the proxy refused:\n%s", screen)
	}
	tm.Type("q")
	if err := tm.Exit(t, 20*time.Second); err != nil {
		t.Fatalf("exit after q: %v\n%s", err, tm.Screen())
	}
	after := tm.Screen()
	if !strings.Contains(after, "stopped after ") || strings.Contains(after, "{Offered") || strings.Contains(after, "Failed to activate") {
		t.Errorf("what quitting left on the terminal:\n%s", after)
	}
}
