package proxy

// BenchmarkStateDrift is `make bench-drift`: why BenchmarkPeers creates
// instances of a process that ends as it starts. Directly against the
// simulated shards, no proxy, it repeats an open loop at half of their
// saturation rate, with a long closed-loop fill after every second
// repetition, as the proxies' turns in a bench-proxy run do; once for a
// process with a task nobody works (every instance stays in the
// simulators' memory) and once, on fresh simulators, for one that ends as
// it starts. Per repetition it prints the latency, the calls dropped for
// want of a slot and the simulators' resident memory; then, for each
// process, how far memory grew and how wide direct's own p99 spread.

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
)

const (
	driftRepeats = 6
	driftFill    = 3 * peerRunTime
)

// rssBytes is a process's resident memory, from /proc (0 when unknown).
func rssBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func totalRSS(shards []*proctest.Process) int64 {
	var n int64
	for _, p := range shards {
		n += rssBytes(p.Cmd.Process.Pid)
	}
	return n
}

func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

type driftResult struct {
	rssStart, rssEnd int64
	p99s             []time.Duration
	dropped          int64
}

func BenchmarkStateDrift(b *testing.B) {
	bin := proctest.Build(b)
	env := []string{"GOMAXPROCS=2"}
	cases := []struct {
		name    string
		process []byte
	}{
		{"task nobody works", load.Process("bench", "bench-work")},
		{"ends as it starts", load.Process("bench")},
	}
	fmt.Printf("\ndirect to %d simulated shards, open loop at half their saturation, %d times, a %v closed-loop fill after every second; resident memory is the simulators' sum\n", benchShards, driftRepeats, driftFill)
	results := make([]driftResult, len(cases))
	for i, c := range cases {
		results[i] = stateDrift(b, bin, env, c.name, c.process)
	}
	fmt.Println("summary:")
	for i, c := range cases {
		r := results[i]
		fmt.Printf("  %-18s memory %s -> %s (%.1fx)  direct p99 %v .. %v  dropped %d\n", c.name,
			mib(r.rssStart), mib(r.rssEnd), float64(r.rssEnd)/float64(r.rssStart),
			slices.Min(r.p99s), slices.Max(r.p99s), r.dropped)
	}
	task, flat := results[0], results[1]
	fmt.Printf("  ratios task/flat: memory at the end %.1fx, worst p99 %.1fx\n",
		float64(task.rssEnd)/float64(flat.rssEnd), float64(slices.Max(task.p99s))/float64(slices.Max(flat.p99s)))
}

// stateDrift runs one case on simulators of its own, so each case starts
// from empty ones (those of a case done stay up idle until the end).
func stateDrift(b *testing.B, bin string, env []string, name string, process []byte) driftResult {
	shards := startBenchShards(b, bin, env, process)
	var addrs []string
	for _, p := range shards {
		addrs = append(addrs, p.Addr)
	}
	clients := creates(dialAll(b, addrs, benchShards*peerConns))
	closedLoop(clients, time.Second)
	sat := closedLoop(clients, peerRunTime)
	settle()
	r := driftResult{rssStart: totalRSS(shards)}
	fmt.Printf("%s: saturation %.0f req/s, memory %s\n", name, sat.rps, mib(r.rssStart))
	for i := range driftRepeats {
		o := openLoop(clients, sat.rps/2, peerRunTime)
		settle()
		r.p99s = append(r.p99s, o.p99)
		r.dropped += o.errors
		fmt.Printf("  open %d at %.0f req/s: p50 %v p99 %v dropped %d  memory %s\n", i+1, sat.rps/2, o.p50, o.p99, o.errors, mib(totalRSS(shards)))
		if i%2 == 1 && i < driftRepeats-1 {
			f := closedLoop(clients, driftFill)
			settle()
			fmt.Printf("  fill: %.0f req/s  memory %s\n", f.rps, mib(totalRSS(shards)))
		}
	}
	r.rssEnd = totalRSS(shards)
	return r
}
