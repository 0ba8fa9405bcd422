//go:build long

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// buildAttacker builds internal/h2/cmd/rapidreset.
func buildAttacker(t *testing.T) string { return buildHelper(t, "internal/h2/cmd/rapidreset") }

// rapidReset runs the attacker exe against addr on conns connections for
// d, in a process of its own, and returns its report.
func rapidReset(t *testing.T, exe, addr string, conns int, d time.Duration) attackReport {
	ctx, cancel := context.WithTimeout(context.Background(), d+budget.Of(30*time.Second))
	defer cancel()
	out, err := exec.CommandContext(ctx, exe, "-addr", addr, "-conns", strconv.Itoa(conns), "-for", d.String(), "-process", "quick").Output()
	if err != nil {
		t.Errorf("the attacker: %v", err) // on the attack's goroutine
		return attackReport{}
	}
	var r attackReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Errorf("the attacker's report %q: %v", out, err)
	}
	return r
}

// attackReport is the attacker's (rapidreset's Report).
type attackReport struct {
	Resets, Dials, Refused int64
	CutOff, Unanswered     int
	LongestMillis          int64
	GoAways                map[string]int
}

// A rapid-reset attack on four connections for 30 s beside a Zeebe
// client creating instances through the same proxy: the proxy cuts every
// attacking connection it serves off within a second of its preface,
// holds those it dials again during the cool-down unanswered, its
// goroutines and memory stay bounded, and the client keeps at least half
// the creates a second it made alone just before (the attacker shares
// the machine's two cores, so part of the loss is its own CPU).
//
// Not parallel: the two rates it compares are measured a minute apart,
// and a neighbour in the package starting or stopping its load between
// them would be read as the attack's doing.
func TestRapidResetAttack(t *testing.T) {
	simPort := proctest.FreePort(t)
	sim := proctest.Start(t, bin, nil, "sim", "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", simPort), "--metrics", "127.0.0.1:0")
	sim.Line(t, "metrics on ")
	px := proctest.Start(t, bin, nil, "proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--shard", fmt.Sprintf("shard-1=127.0.0.1:%d", simPort))
	metrics := strings.TrimSuffix(px.Line(t, "admin on "), "/shards") + "/metrics"
	c := simtest.Client(t, px.Addr)
	ctx := budget.Context(t, 3*time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.ProcessOf("quick"), "quick.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	// creates is the client's closed loop: 16 calls at a time, each
	// answered before the next.
	var created atomic.Int64
	clientCtx, stopClient := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for clientCtx.Err() == nil {
				cctx, cancel := context.WithTimeout(clientCtx, 5*time.Second)
				if _, err := c.NewCreateInstanceCommand().BPMNProcessId("quick").LatestVersion().Send(cctx); err == nil {
					created.Add(1)
				}
				cancel()
			}
		})
	}
	defer func() { stopClient(); wg.Wait() }()
	rateOver := func(d time.Duration) float64 {
		from := created.Load()
		time.Sleep(d)
		return float64(created.Load()-from) / d.Seconds()
	}
	time.Sleep(2 * time.Second) // connections made, caches warm
	goroutines0 := simtest.Metric(t, metrics, "go_goroutines")
	rss0 := simtest.Metric(t, metrics, "process_resident_memory_bytes")
	exe := buildAttacker(t)
	alone := rateOver(10 * time.Second)

	const attackFor = 30 * time.Second
	attackCtx, stopAttack := context.WithTimeout(ctx, attackFor)
	defer stopAttack()
	var attacked sync.WaitGroup
	var attack attackReport
	attacked.Go(func() { attack = rapidReset(t, exe, px.Addr, 4, attackFor) })
	// The proxy's goroutines and memory, read every half second; an
	// admin port that does not answer is a failure of its own.
	var maxGoroutines, maxRSS float64
	var unread []error
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for attackCtx.Err() == nil {
			g, err := simtest.ReadMetric(metrics, "go_goroutines")
			rss, err2 := simtest.ReadMetric(metrics, "process_resident_memory_bytes")
			if err = errors.Join(err, err2); err != nil {
				unread = append(unread, err)
			}
			maxGoroutines, maxRSS = max(maxGoroutines, g), max(maxRSS, rss)
			time.Sleep(500 * time.Millisecond)
		}
	}()
	time.Sleep(2 * time.Second) // the attack under way
	during := rateOver(26 * time.Second)
	attacked.Wait()
	<-watched
	longest, cut := time.Duration(attack.LongestMillis)*time.Millisecond, attack.CutOff
	ratio := during / alone
	t.Logf("rapid reset on 4 connections for 30 s: %d streams written and reset on %d connections, %d cut off (%d of them served, GOAWAY codes %v, the longest after %v; %d closed unanswered, held for the cool-down); %d dials refused",
		attack.Resets, attack.Dials, cut, cut-attack.Unanswered, attack.GoAways, longest, attack.Unanswered, attack.Refused)
	t.Logf("the client: %.0f creates/s alone, %.0f/s under attack (%.2f); the proxy's goroutines %.0f → at most %.0f, RSS %.0f MiB → at most %.0f MiB",
		alone, during, ratio, goroutines0, maxGoroutines, rss0/(1<<20), maxRSS/(1<<20))
	if len(unread) > 0 {
		t.Errorf("the proxy's /metrics did not answer %d times under attack, first: %v", len(unread), unread[0])
	}
	if ratio < 0.5 {
		t.Errorf("the client kept %.0f%% of its creates a second under attack: want at least half", 100*ratio)
	}
	if cut-attack.Unanswered == 0 {
		t.Error("no attacking connection was served before it was cut off: the attack never reached the proxy's defences")
	}
	if cut == 0 || int64(cut) < attack.Dials-4 {
		t.Errorf("%d of %d attacking connections were cut off: want every one but those the attack's end closed", cut, attack.Dials)
	}
	if limit := budget.Of(time.Second); longest > limit {
		t.Errorf("an attacking connection lasted %v: want it cut off within %v", longest, limit)
	}
	if maxGoroutines > goroutines0+2000 {
		t.Errorf("the proxy's goroutines went from %.0f to %.0f: want them bounded", goroutines0, maxGoroutines)
	}
	if maxRSS > rss0+256<<20 {
		t.Errorf("the proxy's RSS went from %.0f to %.0f MiB: want it bounded", rss0/(1<<20), maxRSS/(1<<20))
	}
}
