package registryprobe

import (
	"cmp"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
)

// envServeNothing makes the test binary a Eureka endpoint that answers
// what the probe sends as a registry would and keeps nothing: the floor of
// what any registry served by net/http can do on this machine.
const envServeNothing = "REGISTRYPROBE_SERVE_NOTHING"

// envFloorLists is "INSTANCES,BACKGROUND": how many instances the floor's
// full fetch lists in the probe's app and in its background app, as many
// as the benchmark loads; none when unset.
const envFloorLists = "REGISTRYPROBE_FLOOR_LISTS"

func TestMain(m *testing.M) {
	if os.Getenv(envServeNothing) != "" {
		os.Exit(serveNothing())
	}
	os.Exit(proctest.Main(m))
}

// serveNothing answers registrations (204), renewals and cancellations
// (200) and the status, whatever instance they name, keeping nothing: a
// renewal or a cancellation of an instance never registered succeeds.
// Its full fetch (GET /eureka/apps, the mix's one read) is a body built
// once at the start, listing instances shaped as the probe's
// (envFloorLists of them), JSON, gzipped when asked in one member: so it
// costs the HTTP stack the registry's JSON, and none of the registry's
// work of keeping that body current. The registry's own gzip is a
// member per run of instances (a change compresses one run again) and
// larger; the benchmark prints both sizes. JSON only: the probe asks
// for nothing else.
func serveNothing() int {
	// The same garbage collector target as `shardctl registry serve`.
	debug.SetGCPercent(400)
	var instances, background int
	if v := os.Getenv(envFloorLists); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d", &instances, &background); err != nil {
			fmt.Fprintf(os.Stderr, "$%s=%q: %v\n", envFloorLists, v, err)
			return 1
		}
	}
	full, err := floorFetch(instances, background)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fullGzip := registryapi.Gzip(full)
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
	mux.HandleFunc("PUT /eureka/apps/{app}/{id}", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("DELETE /eureka/apps/{app}/{id}", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /eureka/apps", func(w http.ResponseWriter, r *http.Request) {
		b := full
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(strings.ToLower(r.Header.Get("Accept-Encoding")), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			b = fullGzip
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	})
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

// floorFetch is the floor's full fetch (JSON): the probe's instances as
// the registry lists them after a load, Eureka's defaults filled in,
// stamped some 8 registrations a millisecond, in the registry's order;
// the same JSON as the registry's to within a few bytes an instance.
func floorFetch(instances, background int) ([]byte, error) {
	start := time.Now().UnixMilli()
	var ins []*registryapi.Instance
	for _, app := range []struct {
		name string
		n    int
	}{{appLoad, instances}, {appBackground, background}} {
		for i := range app.n {
			// The ids the probe gives, with a run id of the same length,
			// and the instance as the registry reads it.
			sent := new(prober).instance(app.name, fmt.Sprintf("00000000-%d", i), leaseOfLoad)
			in, err := registryapi.DecodeInstanceJSON(registryapi.EncodeInstanceJSON(sent))
			if err == nil {
				err = in.Validate(app.name)
			}
			if err != nil {
				return nil, err
			}
			at := start + int64(len(ins)/8)
			in.LeaseInfo.RegistrationTimestamp, in.LeaseInfo.LastRenewalTimestamp, in.LeaseInfo.ServiceUpTimestamp = at, at, at
			in.LastUpdatedTimestamp, in.LastDirtyTimestamp = at, at
			ins = append(ins, in)
		}
	}
	// Listed in the registry's order: by app, then id as a string.
	slices.SortFunc(ins, func(a, b *registryapi.Instance) int {
		return cmp.Or(cmp.Compare(a.App, b.App), cmp.Compare(a.InstanceID, b.InstanceID))
	})
	return registryapi.EncodeAppsJSON(&registryapi.Applications{VersionsDelta: "1", AppsHashcode: registryapi.Hashcode(ins),
		Applications: registryapi.Group(ins)}), nil
}

// server is a process the floor benchmarks measure.
type server struct {
	name string
	bin  string
	env  []string
	args []string
}

// floorAndRegistry are the floor, its full fetch listing instances and
// background ones, and `shardctl registry serve` (memory store).
func floorAndRegistry(b *testing.B, instances, background int) []server {
	return []server{
		{"nothing kept (net/http)", os.Args[0], []string{envServeNothing + "=1", fmt.Sprintf("%s=%d,%d", envFloorLists, instances, background)}, nil},
		{"registry (memory)", proctest.Build(b), nil, []string{"registry", "serve", "--listen", "127.0.0.1:0"}},
	}
}

// Each measurement of the floor benchmarks: how many per server, and
// how long each phase runs.
const (
	floorRounds = 3
	floorPhase  = 10 * time.Second
)

// BenchmarkRegisterFloor runs the probe's register burst at 50
// concurrent against `shardctl registry serve` (memory store) and against
// a net/http endpoint that keeps nothing, each in its own process on this
// machine's cores as the probe is, three rounds, and prints the medians
// and the ratios: how far the registry is from the floor of its HTTP
// stack.
//
//	go test -run '^$' -bench RegisterFloor -benchtime 1x ./probes/registryprobe/
func BenchmarkRegisterFloor(b *testing.B) {
	const conc = 50
	servers := floorAndRegistry(b, 0, 0)
	cfg := Config{Concurrency: []int{conc}, Duration: floorPhase, Burst: 1 << 30}
	results := rounds(b, servers, func(s server) Phase {
		return against(b, s, cfg, func(ctx context.Context, p *prober) (Phase, error) {
			return p.registerBurst(ctx, "register (empty)", conc), nil
		})
	})
	floor, reg := results[0], results[1]
	fmt.Printf("register burst at %d concurrent, median of %d rounds of %v:\n", conc, floorRounds, floorPhase)
	for i, s := range servers {
		fmt.Printf("  %-24s %7.0f/s  p99 %v\n", s.name, median(results[i], perSec), seconds(median(results[i], p99)))
	}
	fmt.Printf("  registry/floor: throughput %.2f, p99 %.2f\n", median(reg, perSec)/median(floor, perSec), median(reg, p99)/median(floor, p99))
	b.ReportMetric(median(reg, perSec), "reg/s")
	b.ReportMetric(median(reg, p99)*1e3, "p99-ms")
	b.ReportMetric(median(floor, perSec), "floor-reg/s")
	b.ReportMetric(median(floor, p99)*1e3, "floor-p99-ms")
}

// BenchmarkMixFloor offers the probe's open-loop mix (70% renewals, 20%
// registrations and cancellations, 10% gzipped full fetches) at 5,000
// ops/s over 3,500 instances (500 in the mix's app, 3,000 in another)
// to the registry and to the floor, as BenchmarkRegisterFloor does, and
// prints the median p99s, their ratio, and the offers dropped (due with
// all the phase's workers busy, never sent). It judges nothing: an error
// voids a round and fails it, drops are a figure.
//
//	go test -run '^$' -bench MixFloor -benchtime 1x ./probes/registryprobe/
func BenchmarkMixFloor(b *testing.B) {
	const instances, background, rate = 500, 3000, 5000
	servers := floorAndRegistry(b, instances, background)
	cfg := Config{Instances: instances, Background: background, Duration: floorPhase, MixRate: rate}
	results := rounds(b, servers, func(s server) Phase {
		return against(b, s, cfg, func(ctx context.Context, p *prober) (Phase, error) {
			if _, err := p.load(ctx, appBackground, background); err != nil {
				return Phase{}, fmt.Errorf("load the background: %w", err)
			}
			if _, err := p.load(ctx, appLoad, instances); err != nil {
				return Phase{}, fmt.Errorf("load the mix: %w", err)
			}
			n, err := fetchSize(ctx, p)
			if err != nil {
				return Phase{}, err
			}
			fmt.Printf("  %-24s full fetch gzip after the load: %d bytes\n", s.name, n)
			return p.mixAt(ctx)
		})
	})
	floor, reg := results[0], results[1]
	dropped := func(phs []Phase) (n int) {
		for _, ph := range phs {
			n += ph.Dropped
		}
		return n
	}
	ratio := median(reg, p99) / median(floor, p99)
	fmt.Printf("open-loop mix 70/20/10 at %d/s over %d instances, median of %d rounds of %v: floor p99 %v, registry p99 %v, ratio %.2f, dropped floor %d registry %d (all rounds), errors none (an error fails the run)\n",
		rate, instances+background, floorRounds, floorPhase, seconds(median(floor, p99)), seconds(median(reg, p99)), ratio, dropped(floor), dropped(reg))
	for i, s := range servers {
		fmt.Printf("  %-24s %7.0f/s  p50 %-8v p99 %v\n", s.name, median(results[i], perSec), seconds(median(results[i], p50)), seconds(median(results[i], p99)))
	}
	b.ReportMetric(ratio, "p99-ratio")
	b.ReportMetric(median(reg, p99)*1e3, "p99-ms")
	b.ReportMetric(median(floor, p99)*1e3, "floor-p99-ms")
	b.ReportMetric(float64(dropped(reg)), "dropped")
	b.ReportMetric(float64(dropped(floor)), "floor-dropped")
}

// rounds runs measure against each server in turn, floorRounds times,
// prints each phase as it ends (on stdout: a benchmark's log keeps 10
// lines), and returns each server's phases.
func rounds(b *testing.B, servers []server, measure func(server) Phase) [][]Phase {
	results := make([][]Phase, len(servers))
	for range b.N {
		for round := range floorRounds {
			for i, s := range servers {
				ph := measure(s)
				fmt.Printf("%s, round %d  %-24s %7.0f/s  p50 %-8v p99 %-8v errors %d dropped %d\n", ph.Name, round+1, s.name, ph.PerSec,
					seconds(ph.P50), seconds(ph.P99), ph.Errors-ph.Dropped, ph.Dropped)
				results[i] = append(results[i], ph)
			}
		}
	}
	return results
}

// against starts s, runs measure with a prober of cfg against it, cancels
// what the probe registered and stops s. An error voids the measurement
// and fails the benchmark; drops are a result.
func against(b *testing.B, s server, cfg Config, measure func(context.Context, *prober) (Phase, error)) Phase {
	b.Helper()
	srv := proctest.Start(b, s.bin, s.env, s.args...)
	defer srv.Stop()
	c, err := registryclient.New("http://"+srv.Addr+"/eureka", "")
	if err != nil {
		b.Fatal(err)
	}
	cfg.Registry = c
	if err := cfg.Check(); err != nil {
		b.Fatal(err)
	}
	ctx := budget.Context(b, cfg.Duration+2*time.Minute)
	p, err := newProber(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer p.close()
	ph, err := measure(ctx, p)
	p.cleanupApp("")
	if err != nil {
		b.Fatalf("%s: %v", s.name, err)
	}
	if ph.Ops == 0 || ph.Errors > ph.Dropped {
		b.Fatalf("%s: %s: %d ops, %d errors: %s", s.name, ph.Name, ph.Ops, ph.Errors-ph.Dropped, ph.FirstError)
	}
	return ph
}

// fetchSize is the bytes of a gzipped full fetch.
func fetchSize(ctx context.Context, p *prober) (int64, error) {
	body, err := p.get(ctx, "/apps", true)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	return io.Copy(io.Discard, body)
}

// median is the median of f over phases.
func median(phs []Phase, f func(Phase) float64) float64 {
	v := make([]float64, len(phs))
	for i, ph := range phs {
		v[i] = f(ph)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func perSec(ph Phase) float64 { return ph.PerSec }
func p50(ph Phase) float64    { return ph.P50 }
func p99(ph Phase) float64    { return ph.P99 }

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond)
}

// The floor server is a fair one: it answers what the probe sends as a
// registry would, so a probe against it measures only HTTP: the
// registrations, renewals and cancellations of a load and a mix, the
// status, and a full fetch, plain and gzipped, that lists as many
// instances as it was told.
func TestFloorServerAnswersTheProbe(t *testing.T) {
	proc := proctest.Start(t, os.Args[0], []string{envServeNothing + "=1", envFloorLists + "=2,3"})
	c, err := registryclient.New("http://"+proc.Addr+"/eureka", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := budget.Context(t, 30*time.Second)
	in := &registryapi.Instance{InstanceID: "x", App: "A", HostName: "h", IPAddr: "192.0.2.1", Port: 1, Status: registryapi.StatusUp,
		DataCenterInfo: registryapi.DataCenterInfo{Name: "MyOwn"}}
	if err := c.Register(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := c.Renew(ctx, "A", "x"); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "A", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Registry: c}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	p, err := newProber(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	for _, zipped := range []bool{false, true} {
		body, err := p.get(ctx, "/apps", zipped)
		if err != nil {
			t.Fatal(err)
		}
		r := io.Reader(body)
		if zipped {
			if r, err = gzip.NewReader(body); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(r)
		body.Close()
		if err != nil {
			t.Fatal(err)
		}
		apps, err := registryapi.DecodeAppsJSON(b)
		if err != nil {
			t.Fatalf("full fetch (gzip %v): %v", zipped, err)
		}
		listed := map[string]int{}
		for _, a := range apps.Applications {
			listed[a.Name] += len(a.Instances)
		}
		if want := map[string]int{appLoad: 2, appBackground: 3}; !maps.Equal(listed, want) {
			t.Errorf("full fetch (gzip %v) lists %v, want %v", zipped, listed, want)
		}
	}
	// The probe's own load, mix and cleanup, briefly: nothing fails.
	cfg = Config{Registry: c, Instances: 20, Background: 30, Duration: 500 * time.Millisecond, MixRate: 400}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	p, err = newProber(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	for app, n := range map[string]int{appBackground: cfg.Background, appLoad: cfg.Instances} {
		if _, err := p.load(ctx, app, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, run := range []func(context.Context) (Phase, error){p.mix, p.mixAt} {
		ph, err := run(ctx)
		if err != nil || ph.Ops == 0 || ph.Errors > 0 {
			t.Errorf("%s against the floor: %+v, %v", ph.Name, ph, err)
		}
	}
	p.cleanupApp("")
	if n := p.left(); n > 0 {
		t.Errorf("%d registrations the floor did not cancel", n)
	}
}
