package proxies

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/shardctl/shardctl/internal/signals"
	"github.com/shardctl/shardctl/internal/source"
)

// The proxy's counters of new instances: what its clients asked and what
// it answered (RESOURCE_EXHAUSTED when no shard may take one), and what
// each shard answered it.
const (
	clientRequests = "shardctl_proxy_requests_total"
	shardRequests  = "shardctl_proxy_shard_requests_total"
	refusedCode    = "ResourceExhausted"
)

var refusalFamilies = map[string]bool{clientRequests: true, shardRequests: true}

// creates says whether an RPC starts an instance.
func creates(rpc string) bool { return strings.HasPrefix(rpc, "CreateProcessInstance") }

// Meter reads the refusals of new instances from every proxy's /metrics,
// as rates between one Read and the next: the explicit backpressure of a
// federation is the proxy's answer, not the shards' (a shard the proxy
// gives nothing more refuses nothing itself).
type Meter struct {
	// HTTP reads the proxies (nil: a client with Timeout).
	HTTP *http.Client

	mu   sync.Mutex
	last map[string]refusalCounts // by proxy
}

// refusalCounts are one proxy's counters at one read.
type refusalCounts struct {
	at                 time.Time
	asked, refused     float64
	sent, shardRefused map[string]float64 // by shard
	ok                 bool
}

// Read reads every proxy in views and returns the rates since the last
// Read (nil on the first, or when no proxy answered twice).
func (m *Meter) Read(ctx context.Context, views []View) *signals.Refusals {
	hc := m.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: Timeout}
	}
	now := make(map[string]refusalCounts, len(views))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, v := range views {
		if v.Admin == "" {
			continue
		}
		wg.Go(func() {
			c := readRefusals(ctx, hc, strings.TrimSuffix(v.Admin, "/")+"/metrics")
			mu.Lock()
			now[v.Proxy] = c
			mu.Unlock()
		})
	}
	wg.Wait()
	m.mu.Lock()
	last := m.last
	m.last = now
	m.mu.Unlock()
	var r signals.Refusals
	var asked float64
	sent := map[string]float64{}
	refused := map[string]float64{}
	read := false
	for p, c := range now {
		l, ok := last[p]
		if !ok || !c.ok || !l.ok || !c.at.After(l.at) {
			continue
		}
		read = true
		dt := c.at.Sub(l.at).Seconds()
		asked += source.Increase(l.asked, c.asked) / dt
		r.PerSec += source.Increase(l.refused, c.refused) / dt
		for shard, n := range c.sent {
			sent[shard] += source.Increase(l.sent[shard], n) / dt
			refused[shard] += source.Increase(l.shardRefused[shard], c.shardRefused[shard]) / dt
		}
	}
	if !read {
		return nil
	}
	if asked > 0 {
		r.Share = r.PerSec / asked
	}
	r.AskedPerSec = asked
	r.Shards = map[string]float64{}
	for shard, n := range sent {
		if n > 0 {
			r.Shards[shard] = refused[shard] / n
		}
	}
	return &r
}

func readRefusals(ctx context.Context, hc *http.Client, url string) refusalCounts {
	fams, err := source.ReadFamilies(ctx, hc, url, refusalFamilies)
	c := refusalCounts{at: time.Now(), sent: map[string]float64{}, shardRefused: map[string]float64{}}
	if err != nil {
		return c
	}
	c.ok = true
	each := func(name string, f func(m *dto.Metric, v float64)) {
		if fam := fams[name]; fam != nil {
			for _, m := range fam.GetMetric() {
				if creates(source.LabelValue(m, "rpc")) {
					f(m, source.SampleValue(m))
				}
			}
		}
	}
	each(clientRequests, func(m *dto.Metric, v float64) {
		c.asked += v
		if source.LabelValue(m, "code") == refusedCode {
			c.refused += v
		}
	})
	each(shardRequests, func(m *dto.Metric, v float64) {
		shard := source.LabelValue(m, "shard")
		c.sent[shard] += v
		if source.LabelValue(m, "code") == refusedCode {
			c.shardRefused[shard] += v
		}
	})
	return c
}
