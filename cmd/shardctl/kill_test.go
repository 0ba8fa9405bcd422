package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/proxy"
	"github.com/shardctl/shardctl/internal/sim/simtest"
	"github.com/shardctl/shardctl/probes/load"
)

// One of four shards killed (SIGKILL) under a steady open-loop load
// through the proxy: DOWN within two health intervals, nothing new sent
// to it after, errors only for calls in flight at the kill, throughput
// falls by its share at most (plus 10 points), every instance on the
// survivors completes; restarted, it is back in rotation by itself.
func TestKillOneShardUnderLoad(t *testing.T) {
	t.Parallel()
	const (
		rate     = 60 // instances a second
		interval = 2 * time.Second
	)
	ports := make([]int, 4)
	sims := make([]*proctest.Process, 4)
	args := []string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--health-interval", interval.String()}
	startSim := func(i int) *proctest.Process {
		return proctest.Start(t, bin, nil, "sim", "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--metrics", "127.0.0.1:0", "--partitions", "2")
	}
	for i := range sims {
		ports[i] = proctest.FreePort(t)
		sims[i] = startSim(i)
		args = append(args, "--shard", fmt.Sprintf("shard-%d=127.0.0.1:%d", i+1, ports[i]))
	}
	px := proctest.Start(t, bin, nil, args...)
	admin := px.Line(t, "admin on ")
	state := func(id string) string {
		resp, err := http.Get(admin)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc struct{ Shards []proxy.ShardStatus }
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		for _, s := range doc.Shards {
			if s.ID == id {
				return string(s.State)
			}
		}
		return ""
	}

	c := simtest.Client(t, px.Addr)
	ctx := budget.Context(t, 4*time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}
	type event struct {
		at   time.Time
		slot int
		key  int64
		err  error
	}
	var mu sync.Mutex
	var creates []event
	completed := map[int64]bool{}
	var completeErrs []event
	for range 4 {
		w := c.NewJobWorker().JobType("work").Handler(func(jc worker.JobClient, job entities.Job) {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(cctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				completeErrs = append(completeErrs, event{at: time.Now(), slot: slotOf(job.Key), err: err})
				return
			}
			completed[job.ProcessInstanceKey] = true
		}).MaxJobsActive(64).Concurrency(4).PollInterval(20 * time.Millisecond).RequestTimeout(time.Second).Timeout(30 * time.Second).Open()
		t.Cleanup(w.Close)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for loadCtx.Err() == nil {
			<-tick.C
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				resp, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(cctx)
				e := event{at: time.Now(), err: err}
				if err == nil {
					e.key, e.slot = resp.GetProcessInstanceKey(), slotOf(resp.GetProcessInstanceKey())
				}
				mu.Lock()
				creates = append(creates, e)
				mu.Unlock()
			})
		}
	})
	defer func() { stopLoad(); wg.Wait() }()

	time.Sleep(10 * time.Second)
	killed := time.Now()
	sims[3].Kill()
	budget.Eventually(t, 3*interval, "shard-4 DOWN in the proxy", func() bool { return state("shard-4") == "DOWN" })
	down := time.Now()
	time.Sleep(10 * time.Second)
	restarted := time.Now()
	sims[3] = startSim(3)
	budget.Eventually(t, 30*time.Second, "shard-4 back", func() bool { return state("shard-4") == "UP" })
	back := time.Now()
	time.Sleep(5 * time.Second)
	stopLoad()
	wg.Wait()

	mu.Lock()
	window := func(from, to time.Time) (created, failed int, onDead int) {
		for _, e := range creates {
			if e.at.Before(from) || !e.at.Before(to) {
				continue
			}
			if e.err != nil {
				failed++
				continue
			}
			created++
			if e.slot == 4 {
				onDead++
			}
		}
		return
	}
	beforeN, _, _ := window(killed.Add(-8*time.Second), killed)
	afterN, _, onDead := window(down, restarted)
	_, failedAtKill, _ := window(killed, down)
	_, failedAfter, _ := window(down, restarted)
	perSec := func(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
	before, after := perSec(beforeN, 8*time.Second), perSec(afterN, restarted.Sub(down))
	t.Logf("DOWN %v after SIGKILL (interval %v); creates %.1f/s before, %.1f/s after (%.0f%%); failed creates %d between kill and DOWN, %d after; back %v after restart",
		down.Sub(killed).Round(10*time.Millisecond), interval, before, after, 100*after/before, failedAtKill, failedAfter, back.Sub(restarted).Round(10*time.Millisecond))
	if down.Sub(killed) > budget.Of(2*interval+500*time.Millisecond) {
		t.Errorf("DOWN %v after the kill: want within two intervals", down.Sub(killed))
	}
	if onDead > 0 {
		t.Errorf("%d new instances went to the DOWN shard", onDead)
	}
	if failedAfter > 0 {
		t.Errorf("%d creates failed after the shard was DOWN", failedAfter)
	}
	if after < before*(0.75-0.10) {
		t.Errorf("throughput fell from %.1f/s to %.1f/s: more than the lost shard's share plus 10 points", before, after)
	}
	mu.Unlock()
	// Every instance created on a survivor completes; after the restart,
	// the shard takes new ones again.
	var stranded []int64
	onBack := 0
	budget.Eventually(t, 30*time.Second, "every instance on the survivors to complete", func() bool {
		mu.Lock()
		defer mu.Unlock()
		stranded, onBack = nil, 0
		for _, e := range creates {
			if e.err != nil {
				continue
			}
			if e.slot != 4 && !completed[e.key] {
				stranded = append(stranded, e.key)
			}
			if e.slot == 4 && e.at.After(back) {
				onBack++
			}
		}
		return len(stranded) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if onBack == 0 {
		t.Error("no instance went to shard-4 after it came back")
	}
	var completeFails []string
	for _, e := range completeErrs {
		if e.slot != 4 {
			completeFails = append(completeFails, e.err.Error())
		}
	}
	sort.Strings(completeFails)
	t.Logf("job completions that failed: %d on shard-4 (its jobs died with it), %d on the survivors", len(completeErrs)-len(completeFails), len(completeFails))
	if len(completeFails) > 0 {
		t.Errorf("%d completions of survivors' jobs failed: %v", len(completeFails), completeFails)
	}
}
