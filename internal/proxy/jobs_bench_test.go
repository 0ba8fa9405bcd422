package proxy

// BenchmarkJobPath is `make bench-jobs`: the job path, most of a real
// workload's traffic, through the shardctl proxy and through HAProxy in
// front of the same simulator (two partitions), taking turns for three
// rounds (each round starting with the other: inTurn). Each run creates
// jobPathInstances instances of a three-task process at jobPathRate a
// second with the real Zeebe Go client, and job workers with the
// client's defaults complete every job; the proxy's and the simulator's
// CPU per completed job come from /proc. Then a CPU profile of the proxy
// on the job path.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
)

const (
	jobPathInstances = 3000
	jobPathRate      = 300
)

var jobPathTypes = []string{"jp-1", "jp-2", "jp-3"}

type jobPathResult struct {
	jobs    int64
	elapsed time.Duration
	proxy   time.Duration // CPU per completed job
	sim     time.Duration
}

// jobPath runs one round against addr and counts what the proxy (pid)
// and the simulator spent.
func jobPath(t testing.TB, addr string, proxyPid, simPid int) jobPathResult {
	c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: addr, UsePlaintextConnection: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var jobs, finals atomic.Int64
	for i, typ := range jobPathTypes {
		final := i == len(jobPathTypes)-1
		w := c.NewJobWorker().JobType(typ).Handler(func(jc worker.JobClient, job entities.Job) {
			if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(ctx); err == nil {
				jobs.Add(1)
				if final {
					finals.Add(1)
				}
			}
		}).Open() // the client's defaults: 32 jobs active, 4 handlers, long polls of 10 s
		defer w.Close()
	}
	proxy0, sim0 := cpuTime(proxyPid), cpuTime(simPid)
	start := time.Now()
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / jobPathRate)
	for range jobPathInstances {
		<-tick.C
		wg.Go(func() {
			if _, err := c.NewCreateInstanceCommand().BPMNProcessId("jobpath").LatestVersion().Send(ctx); err != nil {
				t.Errorf("create: %v", err)
			}
		})
	}
	tick.Stop()
	wg.Wait()
	for finals.Load() < jobPathInstances && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	r := jobPathResult{jobs: jobs.Load(), elapsed: time.Since(start)}
	if r.jobs > 0 {
		r.proxy = (cpuTime(proxyPid) - proxy0) / time.Duration(r.jobs)
		r.sim = (cpuTime(simPid) - sim0) / time.Duration(r.jobs)
	}
	return r
}

func BenchmarkJobPath(b *testing.B) {
	haproxy := findTool(b, "haproxy")
	dir := b.TempDir()
	bin := proctest.Build(b)
	gomaxprocs := []string{"GOMAXPROCS=2"}
	sim := proctest.Start(b, bin, gomaxprocs, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2", "--backlog-limit", "-1")
	adminPort := proctest.FreePort(b)
	px := proctest.Start(b, bin, gomaxprocs, benchProxyArgs(adminPort, []string{sim.Addr}, "--profiling")...)
	haproxyCmd, haproxyAddr := startHAProxy(b, dir, haproxy, []string{sim.Addr}, "h2")
	type target struct {
		name, addr string
		pid        int
	}
	targets := []target{
		{"shardctl", px.Addr, px.Cmd.Process.Pid},
		{"haproxy", haproxyAddr, haproxyCmd.Process.Pid},
	}
	if old := os.Getenv(envBaseline); old != "" {
		// Another build of the proxy beside this one, in the same run:
		// a change is measured against the noise of the same rounds.
		base := proctest.Start(b, old, gomaxprocs, benchProxyArgs(proctest.FreePort(b), []string{sim.Addr})...)
		targets = append(targets, target{"baseline", base.Addr, base.Cmd.Process.Pid})
	}
	for _, tg := range targets {
		c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: tg.addr, UsePlaintextConnection: true})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.NewDeployResourceCommand().AddResource(load.Process("jobpath", jobPathTypes...), "jobpath.bpmn").Send(context.Background()); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	simPid := sim.Cmd.Process.Pid
	results := map[string][]jobPathResult{}
	fmt.Printf("\njob path: %d instances of a %d-task process at %d/s, job workers with the Zeebe client's defaults, one simulator with 2 partitions\n",
		jobPathInstances, len(jobPathTypes), jobPathRate)
	fmt.Printf("%-6s %-9s %8s %8s %16s %14s\n", "ROUND", "TARGET", "JOBS", "SECONDS", "PROXY CPU/JOB", "SIM CPU/JOB")
	for round := 1; round <= peerRounds; round++ {
		for _, tg := range inTurn(targets, round) {
			r := jobPath(b, tg.addr, tg.pid, simPid)
			results[tg.name] = append(results[tg.name], r)
			fmt.Printf("%-6d %-9s %8d %8.1f %16v %14v\n", round, tg.name, r.jobs, r.elapsed.Seconds(), r.proxy.Round(time.Microsecond), r.sim.Round(time.Microsecond))
		}
	}
	med := func(name string, f func(jobPathResult) time.Duration) time.Duration {
		var xs []float64
		for _, r := range results[name] {
			xs = append(xs, float64(f(r)))
		}
		return time.Duration(median(xs))
	}
	proxyCPU := func(r jobPathResult) time.Duration { return r.proxy }
	simCPU := func(r jobPathResult) time.Duration { return r.sim }
	fmt.Printf("\nmedians of %d rounds: proxy CPU per completed job shardctl %v, haproxy %v: shardctl/haproxy %.2f (target <= 1.0); simulator %v / %v\n",
		peerRounds, med("shardctl", proxyCPU).Round(time.Microsecond), med("haproxy", proxyCPU).Round(time.Microsecond),
		float64(med("shardctl", proxyCPU))/float64(med("haproxy", proxyCPU)),
		med("shardctl", simCPU).Round(time.Microsecond), med("haproxy", simCPU).Round(time.Microsecond))
	if len(results["baseline"]) > 0 {
		fmt.Printf("baseline ($%s) %v: shardctl/baseline %.2f\n", envBaseline, med("baseline", proxyCPU).Round(time.Microsecond),
			float64(med("shardctl", proxyCPU))/float64(med("baseline", proxyCPU)))
	}
	printProfile(b, bin, adminPort, "on the job path", func() { jobPath(b, px.Addr, px.Cmd.Process.Pid, simPid) })
}
