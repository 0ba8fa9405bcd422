package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/entities"
	"github.com/camunda/zeebe/clients/go/v8/pkg/worker"
	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
)

// SIGTERM to one of two proxies behind one client address list, under
// load: it keeps serving for --shutdown-delay, ends its long polls and
// job streams --drain-batch a second, exits within --shutdown-timeout;
// no job completion fails and no job is stranded (every instance created
// completes).
func TestProxySIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	var shards []string
	for _, id := range []string{"a", "b"} {
		s := proctest.Start(t, bin, nil, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "2")
		shards = append(shards, "--shard", id+"="+s.Addr)
	}
	const timeout = 20 * time.Second
	var proxies []*proctest.Process
	for range 2 {
		proxies = append(proxies, proctest.Start(t, bin, nil, append([]string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
			"--shutdown-delay", "1s", "--drain-batch", "1", "--shutdown-timeout", timeout.String()}, shards...)...))
	}
	// One client over both proxies, as behind a Kubernetes Service.
	r := manual.NewBuilderWithScheme("proxies")
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: proxies[0].Addr}, {Addr: proxies[1].Addr}}})
	c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: "proxies:///both", UsePlaintextConnection: true,
		DialOpts: []grpc.DialOption{grpc.WithResolvers(r), grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := budget.Context(t, 3*time.Minute)
	if _, err := c.NewDeployResourceCommand().AddResource(load.Process("order", "work"), "order.bpmn").Send(ctx); err != nil {
		t.Fatal(err)
	}

	var created, completed, completeFailed, createFailed atomic.Int64
	done := sync.Map{}
	for i := range 8 { // polling workers, and two that stream
		w := c.NewJobWorker().JobType("work").Handler(func(jc worker.JobClient, job entities.Job) {
			cctx, cancel := context.WithTimeout(ctx, budget.Of(10*time.Second))
			defer cancel()
			if _, err := jc.NewCompleteJobCommand().JobKey(job.Key).Send(cctx); err != nil {
				completeFailed.Add(1)
				t.Logf("complete %d: %v", job.Key, err)
				return
			}
			if _, dup := done.LoadOrStore(job.ProcessInstanceKey, true); !dup {
				completed.Add(1)
			}
		}).MaxJobsActive(16).Concurrency(2).PollInterval(50 * time.Millisecond).RequestTimeout(5 * time.Second).
			Timeout(30 * time.Second).StreamEnabled(i < 2).BackoffSupplier(load.Backoff()).Open()
		t.Cleanup(w.Close)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(25 * time.Millisecond) // 40 a second
		defer tick.Stop()
		for loadCtx.Err() == nil {
			<-tick.C
			wg.Go(func() {
				if _, err := c.NewCreateInstanceCommand().BPMNProcessId("order").LatestVersion().Send(ctx); err != nil {
					createFailed.Add(1)
					t.Logf("create: %v", err)
					return
				}
				created.Add(1)
			})
		}
	})
	budget.Eventually(t, 20*time.Second, "instances to complete", func() bool { return completed.Load() > 40 })

	// Three job streams for a type nobody creates, straight on the proxy
	// to stop: the load's own polls return as fast as jobs arrive and its
	// two streams may both sit on the other proxy, so these are the long
	// calls the drain is sure to meet. Each end is timed as the client sees it.
	const idle = 3
	conn, err := grpc.NewClient(proxies[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	streamEnds := make(chan time.Time, idle)
	for range idle {
		st, err := pb.NewGatewayClient(conn).StreamActivatedJobs(ctx, &pb.StreamActivatedJobsRequest{Type: "idle", Worker: "idle", Timeout: 30_000})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				if _, err := st.Recv(); err != nil {
					streamEnds <- time.Now()
					return
				}
			}
		}()
	}
	budget.Eventually(t, 10*time.Second, "the idle streams to open on the proxy", func() bool {
		return proxyGauge(t, proxies[0], "shardctl_proxy_long_calls_open") >= idle
	})

	stopped := time.Now()
	if err := proxies[0].Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-proxies[0].Done():
	case <-time.After(budget.Of(timeout + 5*time.Second)):
		t.Fatalf("the proxy did not exit within --shutdown-timeout %v", timeout)
	}
	took := time.Since(stopped)
	if err := proxies[0].Err(); err != nil {
		t.Errorf("the stopped proxy: %v\n%s", err, proxies[0].Stderr())
	}
	batches, ended := 0, 0
	for _, m := range regexp.MustCompile(`ended (\d+) long polls and job streams, (\d+) left`).FindAllStringSubmatch(proxies[0].Stderr(), -1) {
		n, _ := strconv.Atoi(m[1])
		if n > 1 {
			t.Errorf("a batch of %d over --drain-batch 1: %s", n, m[0])
		}
		batches, ended = batches+1, ended+n
	}
	t.Logf("stopped in %v: %d long calls ended in %d batches, a second apart", took.Round(10*time.Millisecond), ended, batches)
	if ended < idle || took < time.Duration(batches)*time.Second {
		t.Errorf("%d long calls ended in %d batches within %v: want at least the %d idle streams, one a second after the 1 s delay\n%s", ended, batches, took, idle, proxies[0].Stderr())
	}
	var ends []time.Time
	for range idle {
		select {
		case e := <-streamEnds:
			ends = append(ends, e)
		case <-time.After(budget.Of(5 * time.Second)):
			t.Fatalf("only %d of %d idle streams ended at the client", len(ends), idle)
		}
	}
	slices.SortFunc(ends, time.Time.Compare)
	if spread := ends[idle-1].Sub(ends[0]); spread < time.Duration(idle-1)*900*time.Millisecond {
		t.Errorf("the %d idle streams ended within %v of each other: want one a second at --drain-batch 1", idle, spread)
	}

	time.Sleep(2 * time.Second) // load through the other proxy alone
	stopLoad()
	wg.Wait()
	budget.Eventually(t, 30*time.Second, "every instance created to complete", func() bool { return completed.Load() == created.Load() })
	if completeFailed.Load() > 0 {
		t.Errorf("%d job completions failed", completeFailed.Load())
	}
	t.Logf("created %d (%d creates failed), completed %d", created.Load(), createFailed.Load(), completed.Load())
}

// proxyGauge reads one unlabelled gauge from a proxy's admin /metrics.
func proxyGauge(t *testing.T, p *proctest.Process, name string) float64 {
	t.Helper()
	url := strings.TrimSuffix(p.Line(t, "admin on "), "/shards") + "/metrics"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("%s lacks %s", url, name)
	return 0
}
