package proxy

// BenchmarkSearchFanOut is `make bench-search`: the latency a federated
// search adds. Three simulated shards hold a few thousand process
// instances each; the same searches go to the three shards at once
// straight from the client (the slowest of the three answers is what the
// client waits for: "direct") and through shardctl's REST front, which
// asks the three itself and merges. Interleaved call by call, in rounds,
// one and eight in flight; p50 and p99 of each, and shardctl's p99 minus
// direct's.

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
)

const (
	searchSeed   = 6000 // instances, spread over the shards
	searchRounds = 5
	searchCalls  = 300 // per round, target and concurrency
)

var benchSearches = []string{
	// Operate's first view: the newest active instances.
	`{"filter":{"state":"ACTIVE"},"sort":[{"field":"startDate","order":"DESC"}],"page":{"limit":100}}`,
	// A later page by offset, sorted by key.
	`{"filter":{"processDefinitionId":"search"},"sort":[{"field":"processInstanceKey"}],"page":{"from":200,"limit":50}}`,
	// Jobs of a type, by instance.
	`{"filter":{"type":"search-task","state":"CREATED"},"sort":[{"field":"processInstanceKey","order":"DESC"}],"page":{"limit":100}}`,
}

func searchOnce(client *http.Client, base string, body string) error {
	resource := "process-instances"
	if bytes.Contains([]byte(body), []byte(`"type"`)) {
		resource = "jobs"
	}
	return postJSON(client, "http://"+base+"/v2/"+resource+"/search", []byte(body))
}

func percentileOf(xs []time.Duration, p float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func BenchmarkSearchFanOut(b *testing.B) {
	bin := proctest.Build(b)
	gomaxprocs := []string{"GOMAXPROCS=2"}
	var shardFlags, restAddrs []string
	for range benchShards {
		p := proctest.Start(b, bin, gomaxprocs, "sim", "serve", "--listen", "127.0.0.1:0", "--rest-listen", "127.0.0.1:0",
			"--metrics", "127.0.0.1:0", "--partitions", "3", "--backlog-limit", "-1")
		rest := restAddr(b, p)
		shardFlags, restAddrs = append(shardFlags, p.Addr+",rest=http://"+rest), append(restAddrs, rest)
	}
	adminPort := proctest.FreePort(b)
	px := proctest.Start(b, bin, gomaxprocs, benchProxyArgs(adminPort, shardFlags, "--rest-listen", "127.0.0.1:0", "--profiling")...)
	deployBench(b, px.Addr, load.Process("search", "search-task"))
	proxyREST := restAddr(b, px)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxIdleConns: 256}}
	seed := make(chan struct{}, searchSeed)
	for range searchSeed {
		seed <- struct{}{}
	}
	close(seed)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range seed {
				if err := postJSON(client, "http://"+proxyREST+"/v2/process-instances", []byte(`{"processDefinitionId":"search"}`)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	// direct asks every shard at once and waits for the last answer.
	direct := func(body string) error {
		errs := make(chan error, len(restAddrs))
		for _, a := range restAddrs {
			go func() { errs <- searchOnce(client, a, body) }()
		}
		var err error
		for range restAddrs {
			if e := <-errs; e != nil {
				err = e
			}
		}
		return err
	}
	proxied := func(body string) error { return searchOnce(client, proxyREST, body) }

	fmt.Printf("\nsearches of %d process instances over %d simulated shards, %d rounds of %d calls per target; direct = the three shards asked at once by the client, the slowest answer\n",
		searchSeed, benchShards, searchRounds, searchCalls)
	for _, inflight := range []int{1, 8} {
		var d99, p99, d50, p50 []float64
		cpu0 := cpuTime(px.Cmd.Process.Pid)
		for round := 1; round <= searchRounds; round++ {
			var mu sync.Mutex
			var dl, pl []time.Duration
			work := make(chan int, searchCalls)
			for i := range searchCalls {
				work <- i
			}
			close(work)
			var wg sync.WaitGroup
			for range inflight {
				wg.Go(func() {
					for i := range work {
						body := benchSearches[i%len(benchSearches)]
						// In turn, so both meet the same moment of the machine.
						first, second := direct, proxied
						if i%2 == 1 {
							first, second = proxied, direct
						}
						t0 := time.Now()
						err1 := first(body)
						t1 := time.Now()
						err2 := second(body)
						t2 := time.Now()
						if err1 != nil || err2 != nil {
							b.Errorf("search: %v %v", err1, err2)
							return
						}
						mu.Lock()
						if i%2 == 0 {
							dl, pl = append(dl, t1.Sub(t0)), append(pl, t2.Sub(t1))
						} else {
							pl, dl = append(pl, t1.Sub(t0)), append(dl, t2.Sub(t1))
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if b.Failed() {
				return
			}
			fmt.Printf("%d in flight, round %d: direct p50 %v p99 %v | shardctl p50 %v p99 %v\n", inflight, round,
				percentileOf(dl, 0.5).Round(time.Microsecond), percentileOf(dl, 0.99).Round(time.Microsecond),
				percentileOf(pl, 0.5).Round(time.Microsecond), percentileOf(pl, 0.99).Round(time.Microsecond))
			d50, d99 = append(d50, float64(percentileOf(dl, 0.5))), append(d99, float64(percentileOf(dl, 0.99)))
			p50, p99 = append(p50, float64(percentileOf(pl, 0.5))), append(p99, float64(percentileOf(pl, 0.99)))
		}
		ms := func(x float64) time.Duration { return time.Duration(x).Round(time.Microsecond) }
		fmt.Printf("%d in flight: shardctl's CPU per search %v\n", inflight, ((cpuTime(px.Cmd.Process.Pid) - cpu0) / (searchRounds * searchCalls)).Round(time.Microsecond))
		fmt.Printf("%d in flight, medians of %d rounds: direct p50 %v p99 %v | shardctl p50 %v p99 %v | shardctl's p99 − direct's %v, ratio %.2f\n",
			inflight, searchRounds, ms(median(d50)), ms(median(d99)), ms(median(p50)), ms(median(p99)),
			ms(median(p99)-median(d99)), median(p99)/median(d99))
	}
	printProfile(b, bin, adminPort, "under searches, 8 in flight", func() {
		var wg sync.WaitGroup
		stop := time.Now().Add(5 * time.Second)
		for g := range 8 {
			wg.Go(func() {
				for i := g; time.Now().Before(stop); i++ {
					_ = proxied(benchSearches[i%len(benchSearches)])
				}
			})
		}
		wg.Wait()
	})
}
