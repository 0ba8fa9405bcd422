package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/logs/logstest"
	"github.com/shardctl/shardctl/internal/proxy/route"
	"github.com/shardctl/shardctl/internal/registry"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/internal/sim"
	"github.com/shardctl/shardctl/internal/sim/simtest"
)

// blackhole relays TCP to a target until told to drop: from then on, the
// connections it relays go silent both ways without closing (a
// half-open connection, as a NAT or firewall that forgot it leaves
// one), and so do new ones, until it lets traffic through again.
type blackhole struct {
	ln     net.Listener
	target string
	gen    atomic.Int64 // a connection relays while the generation is its own
	holed  atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, target: target}
	b.wg.Go(b.accept)
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *blackhole) accept() {
	for {
		nc, err := b.ln.Accept()
		if err != nil {
			return
		}
		gen := b.gen.Load()
		if b.holed.Load() {
			gen = -1
		}
		up, err := net.Dial("tcp", b.target)
		if err != nil {
			nc.Close()
			continue
		}
		b.mu.Lock()
		b.conns = append(b.conns, nc, up)
		b.mu.Unlock()
		relay := func(dst, src net.Conn) {
			_, _ = io.Copy(genWriter{b, gen, dst}, src)
			dst.Close()
			src.Close()
		}
		b.wg.Go(func() { relay(up, nc) })
		b.wg.Go(func() { relay(nc, up) })
	}
}

// drop makes every connection silent; pass lets new ones through.
func (b *blackhole) drop() { b.holed.Store(true); b.gen.Add(1) }
func (b *blackhole) pass() { b.holed.Store(false); b.gen.Add(1) }

// genWriter writes while the relay's generation is gen, and swallows
// what comes after.
type genWriter struct {
	b   *blackhole
	gen int64
	dst net.Conn
}

func (w genWriter) Write(p []byte) (int, error) {
	if w.b.gen.Load() != w.gen {
		return len(p), nil
	}
	return w.dst.Write(p)
}

// A registry that goes silent behind a half-open connection (no close,
// no keep-alive) is noticed within the watch's silence limit: the proxy
// says so in /readyz and shardctl_proxy_registry_reachable, keeps routing
// on the shard set it has, and reconnects once the registry can be
// reached again.
func TestRegistrySilenceIsNoticed(t *testing.T) {
	srv, err := registry.New(registry.Config{Listen: "127.0.0.1:0", Store: "memory", WatchKeepAlive: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	hole := startBlackhole(t, srv.Addr().String())
	client, err := registryclient.New("http://"+hole.ln.Addr().String()+"/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	client.WatchSilence = budget.Of(time.Second)
	sims := simtest.StartN(t, 1, sim.Config{Partitions: 1})
	in, err := registryapi.NewShardInstance(registryapi.ShardRegistration{App: registryapi.DefaultShardsApp, ID: "blue-1", Address: sims[0].Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Registry().Register(registryapi.DefaultShardsApp, in); err != nil {
		t.Fatal(err)
	}
	log, lines := logstest.New()
	p := startProxy(t, Config{Registry: client, Logger: log, Health: route.HealthConfig{Interval: -1}})
	shardsReady(t, p, 1)
	readyz := func() string {
		resp, err := http.Get("http://" + p.AdminAddr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/readyz %d %q: want 200", resp.StatusCode, b)
		}
		return string(b)
	}
	if got := readyz(); got != "ok\n" {
		t.Errorf("/readyz %q with the registry heard: want ok", got)
	}

	hole.drop()
	broken := lines.Wait(t, 3*time.Second, "registry watch broken, reconnecting", "level", "WARN")
	if err, _ := broken["err"].(string); !strings.Contains(err, "nothing heard") {
		t.Errorf("the broken watch's error %q: want it to say it heard nothing", err)
	}
	if got := readyz(); !strings.HasPrefix(got, "ok\nwarning: the registry has been unreachable since ") {
		t.Errorf("/readyz %q with the registry silent: want ok with a warning", got)
	}
	if v := proxyMetric(t, p, "shardctl_proxy_registry_reachable"); v != 0 {
		t.Errorf("shardctl_proxy_registry_reachable %v with the registry silent: want 0", v)
	}
	gw := pb.NewGatewayClient(dial(t, p.Addr().String()))
	if _, err := gw.Topology(budget.Context(t, time.Minute), &pb.TopologyRequest{}); err != nil {
		t.Errorf("a call while the registry is silent: %v", err)
	}

	hole.pass()
	lines.Wait(t, 20*time.Second, "registry watch reconnected", "level", "INFO")
	budget.Eventually(t, 5*time.Second, "/readyz and the gauge to say the registry is heard", func() bool {
		return readyz() == "ok\n" && proxyMetric(t, p, "shardctl_proxy_registry_reachable") == 1
	})
}
