// Package budget gives tests time limits that come from how fast this
// machine runs now, not from a constant that holds only on a quiet one.
//
// A limit is written as what a quiet core needs (budget.Of(30*time.Second))
// and stretched by the machine's slowdown: the time a fixed piece of Go
// work takes now, compiled as the test is (with -race or without), over
// the time it took on a quiet core of the machine the suite was written
// on, without -race. A cold CI machine compiling every package at once,
// a benchmark running beside the suite, and the race detector all show in
// that ratio. It is measured again at most once a second and never goes
// down within a test process, so a limit set late in a busy run is not
// shorter than one set early.
//
// Bounds that are the point of a test (a latency, a reaction time) are not
// stretched this way: they are compared with a baseline measured in the
// same run, so a slow machine moves both.
// Tests only; it imports nothing of this module.
package budget

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// quietWork is how long work takes, measured as Slowdown measures it, in a
// fresh test process on a quiet core of the development machine (2 cores,
// go1.26, no -race): the median of seven processes. `go test -v -run
// TestOfStretchesNeverShrinks ./internal/budget` prints the figure here.
const quietWork = 1100 * time.Microsecond

// EnvSlowdown multiplies every budget, for a machine slower than any
// measurement shows (e.g. one throttled in bursts).
const EnvSlowdown = "SHARDCTL_TEST_SLOWDOWN"

// maxSlowdown bounds the stretch, so a hung test still ends.
const maxSlowdown = 40

var state struct {
	sync.Mutex
	slowdown float64
	measured time.Time
}

// Slowdown is how many times slower than a quiet core this machine runs
// the test's code now (1 at least).
func Slowdown() float64 {
	state.Lock()
	defer state.Unlock()
	if time.Since(state.measured) >= time.Second {
		state.slowdown = max(state.slowdown, measure())
		state.measured = time.Now()
	}
	return state.slowdown * Declared()
}

// Declared is the slowdown EnvSlowdown declares, 1 when unset: all a
// bound that is the point of a test (a failover's time) may be
// stretched by, since no measured slowdown makes etcd's timeouts longer.
func Declared() float64 {
	v, err := strconv.ParseFloat(os.Getenv(EnvSlowdown), 64)
	if err != nil || v < 1 || math.IsInf(v, 0) {
		return 1
	}
	return v
}

// measure times work five times, after one run that pays for page
// faults and cold caches, and takes the median, so one preemption does
// not set every budget of the process.
func measure() float64 {
	runtime.KeepAlive(work())
	var runs [5]time.Duration
	for i := range runs {
		start := time.Now()
		runtime.KeepAlive(work())
		runs[i] = time.Since(start)
	}
	slices.Sort(runs[:])
	return min(max(1, float64(runs[2])/float64(quietWork)), maxSlowdown)
}

// work is a small, fixed mix of what the suite's code does: allocation,
// map writes and reads, slice appends and a sort. The race detector
// instruments every one of those accesses, as it does the code under test.
func work() int {
	const n = 4096
	m := make(map[int]int)
	var s []int
	for i := range n {
		k := (i * 7919) % 8191
		m[k] = i
		s = append(s, k)
	}
	slices.Sort(s)
	total := 0
	for _, k := range s {
		total += m[k]
	}
	return total
}

// Of stretches d, what a quiet core needs, by the machine's slowdown.
func Of(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Slowdown())
}

// Capped is Of(d) for a wait the test imposes and every run pays in full
// (a timeout meant to expire, a lease meant to run out): stretched like a
// limit, but never past most, since the slowdown under -race with the
// suite running (10–20×, and never down within a process) would make it
// minutes.
func Capped(d, most time.Duration) time.Duration {
	return min(Of(d), most)
}

// Context is a context that ends after Of(d) or with the test.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Of(d))
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond until it holds, and fails the test naming what it
// waited for when it does not within Of(d).
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Wait(Of(d), cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Wait polls cond every few milliseconds until it holds or limit passes;
// the wait itself is not stretched.
func Wait(limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v (slowdown %.1f×)", limit.Round(time.Millisecond), Slowdown())
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
	return nil
}
