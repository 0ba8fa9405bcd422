//go:build long

package capacity

// The knee search from far under the knee with five-second stages, as
// the published method runs it, takes two minutes: `go test -tags long
// -run TestKneeOfASimulatedMonolith ./probes/capacity/` (make test-long).
// TestKneeNearTheStart runs the same scenario in seconds in the default
// suite.

import (
	"testing"
	"time"
)

// Against a simulated monolith of a known capacity the probe stops where
// completions collapse (under 15% of the starts), and reports a knee
// within 10% of the simulator's (kneeScenario.check says how that is
// read).
func TestKneeOfASimulatedMonolith(t *testing.T) {
	t.Parallel()
	kneeScenario{capacity: 200, limit: 5 * time.Minute,
		probe: Config{Warmup: 3 * time.Second, Start: 15, Stage: 5 * time.Second, Stream: true},
	}.check(t, 0.10)
}
