package registryprobe

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
)

// envServeNothing makes the test binary a Eureka endpoint that accepts
// every registration and cancellation and keeps nothing: the floor of
// what any registry served by net/http can do on this machine.
const envServeNothing = "REGISTRYPROBE_SERVE_NOTHING"

func TestMain(m *testing.M) {
	if os.Getenv(envServeNothing) != "" {
		os.Exit(serveNothing())
	}
	os.Exit(proctest.Main(m))
}

func serveNothing() int {
	// The same garbage collector target as `shardctl registry serve`.
	debug.SetGCPercent(400)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /shardctl/v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	})
	mux.HandleFunc("POST /eureka/apps/{app}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /eureka/apps/{app}/{id}", func(http.ResponseWriter, *http.Request) {})
	srv := &http.Server{Handler: mux}
	fmt.Fprintf(os.Stderr, "listening on %s\n", ln.Addr())
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
		<-stop
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// BenchmarkRegisterFloor runs the probe's register burst at 50
// concurrent against `shardctl registry serve` (memory store) and against
// a net/http endpoint that keeps nothing, each in its own process on this
// machine's cores as the probe is, three rounds, and prints the medians
// and the ratios: how far the registry is from the floor of its HTTP
// stack.
//
//	go test -run '^$' -bench RegisterFloor -benchtime 1x ./probes/registryprobe/
func BenchmarkRegisterFloor(b *testing.B) {
	bin := proctest.Build(b)
	const rounds, conc = 3, 50
	phaseTime := 10 * time.Second
	servers := []struct {
		name string
		bin  string
		env  []string
		args []string
	}{
		{"nothing kept (net/http)", os.Args[0], []string{envServeNothing + "=1"}, nil},
		{"registry (memory)", bin, nil, []string{"registry", "serve", "--listen", "127.0.0.1:0"}},
	}
	results := make([][]Phase, len(servers))
	for range b.N {
		for round := range rounds {
			for i, s := range servers {
				ph := burstAgainst(b, s.bin, s.env, s.args, conc, phaseTime)
				b.Logf("round %d  %-24s %7.0f/s  p50 %-8v p99 %v  errors %d", round+1, s.name, ph.PerSec,
					seconds(ph.P50), seconds(ph.P99), ph.Errors)
				results[i] = append(results[i], ph)
			}
		}
	}
	median := func(phs []Phase, f func(Phase) float64) float64 {
		v := make([]float64, len(phs))
		for i, ph := range phs {
			v[i] = f(ph)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	perSec := func(ph Phase) float64 { return ph.PerSec }
	p99 := func(ph Phase) float64 { return ph.P99 }
	floor, reg := results[0], results[1]
	fmt.Printf("register burst at %d concurrent, median of %d rounds of %v:\n", conc, rounds, phaseTime)
	for i, s := range servers {
		fmt.Printf("  %-24s %7.0f/s  p99 %v\n", s.name, median(results[i], perSec), seconds(median(results[i], p99)))
	}
	fmt.Printf("  registry/floor: throughput %.2f, p99 %.2f\n", median(reg, perSec)/median(floor, perSec), median(reg, p99)/median(floor, p99))
	b.ReportMetric(median(reg, perSec), "reg/s")
	b.ReportMetric(median(reg, p99)*1e3, "p99-ms")
	b.ReportMetric(median(floor, perSec), "floor-reg/s")
	b.ReportMetric(median(floor, p99)*1e3, "floor-p99-ms")
}

// burstAgainst starts a server process, runs one register burst against
// it and stops it.
func burstAgainst(b *testing.B, bin string, env, args []string, conc int, d time.Duration) Phase {
	b.Helper()
	srv := proctest.Start(b, bin, env, args...)
	defer srv.Stop()
	c, err := registryclient.New("http://"+srv.Addr+"/eureka", "")
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Registry: c, Concurrency: []int{conc}, Duration: d, Burst: 1 << 30}
	if err := cfg.Check(); err != nil {
		b.Fatal(err)
	}
	ctx := budget.Context(b, d+time.Minute)
	p, err := newProber(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.close()
	ph := p.registerBurst(ctx, "register (empty)", conc)
	p.cleanupApp("")
	if ph.Ops == 0 || ph.Errors > 0 {
		b.Fatalf("%s: %d ops, %d errors: %s", bin, ph.Ops, ph.Errors, ph.FirstError)
	}
	return ph
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond)
}

// The floor server is a fair one: it answers what the probe sends as a
// registry would, so a probe against it measures only HTTP.
func TestFloorServerAnswersTheProbe(t *testing.T) {
	p := proctest.Start(t, os.Args[0], []string{envServeNothing + "=1"})
	c, err := registryclient.New("http://"+p.Addr+"/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := budget.Context(t, 30*time.Second)
	in := &registryapi.Instance{InstanceID: "x", App: "A", HostName: "h", IPAddr: "192.0.2.1", Port: 1, Status: registryapi.StatusUp,
		DataCenterInfo: registryapi.DataCenterInfo{Name: "MyOwn"}}
	if err := c.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "A", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
}
