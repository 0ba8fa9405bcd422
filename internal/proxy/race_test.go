//go:build race

package proxy

// The race detector slows every call several times over; timed bounds are
// scaled by this factor when it is on. The figures in notes come from runs
// without it (make bench-proxy).
const raceSlowdown = 5
