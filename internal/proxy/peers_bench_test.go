package proxy

// BenchmarkPeers is `make bench-proxy`: CreateProcessInstance at 64 in
// flight against three simulated shards (--capacity 0), through the
// shardctl proxy, nginx (grpc_pass, least_conn) and HAProxy (leastconn,
// h2), and directly to the shards as the ceiling. Every component runs as
// its own process; targets take turns for three rounds because these
// machines are noisy (direct first, then the proxies, each round starting
// with the next one: inTurn); figures are per round and medians, with
// ratios. Then the latency the proxy adds at half of the direct
// saturation rate, and a CPU profile of the proxy under load.
// Configuration of the peers follows ../shared/BENCH-PEERS.md.

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/shardctl/shardctl/internal/gatewaypb"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/internal/proctest"
	"github.com/shardctl/shardctl/internal/proxy/route"
)

const (
	peerConcurrency = 64
	peerConns       = 4
	// peerRounds: five, not three, since a neighbour's load on these
	// 2-core machines moves a round's CPU per call by a tenth and more.
	peerRounds  = 5
	peerRunTime = 5 * time.Second
)

// envBaseline names another build of shardctl that the benchmarks run
// beside this one (target "baseline"), to measure a change in one run.
const envBaseline = "BENCH_BASELINE"

type peerResult struct {
	rps      float64
	p50, p99 time.Duration
	errors   int64
	cpuPerOp time.Duration // the proxy process's CPU per request, when known
}

func findTool(t testing.TB, name string) string {
	for _, dir := range append(filepath.SplitList(os.Getenv("PATH")), "/usr/sbin", "/sbin") {
		if p := filepath.Join(dir, name); isExec(p) {
			return p
		}
	}
	t.Fatalf("%s is not installed: make bench-proxy installs it (scripts/install-debs.sh nginx haproxy)", name)
	return ""
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// startProcess runs a long-lived process for the benchmark and stops it at
// the end.
func startProcess(t testing.TB, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	log, err := os.Create(filepath.Join(dir, filepath.Base(name)+"-"+strconv.Itoa(proctest.FreePort(t))+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		// SIGTERM, not SIGKILL: nginx's master stops its workers only when
		// it is asked; killed, it leaves them running.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
	})
	return cmd
}

// startHAProxy runs HAProxy in front of the shards as BENCH-PEERS.md
// says is fair (leastconn, connections reused; h2 both sides for gRPC,
// HTTP/1.1 for REST when proto is ""), and returns it with its address
// once it listens.
func startHAProxy(t testing.TB, dir, haproxy string, shardAddrs []string, proto string) (*exec.Cmd, string) {
	port := proctest.FreePort(t)
	with := ""
	if proto != "" {
		with = " proto " + proto
	}
	var servers strings.Builder
	for i, a := range shardAddrs {
		fmt.Fprintf(&servers, "  server s%d %s%s\n", i+1, a, with)
	}
	conf := fmt.Sprintf(`global
  nbthread 2
  maxconn 8000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend gw
  bind 127.0.0.1:%d%s
  default_backend shards
backend shards
  balance leastconn
  http-reuse always
%s`, port, with, servers.String())
	file := filepath.Join(dir, "haproxy-"+strconv.Itoa(port)+".cfg")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := startProcess(t, dir, haproxy, "-f", file, "-db")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitListening(t, addr)
	return cmd, addr
}

// startNginx runs nginx in front of the shards as BENCH-PEERS.md says is
// fair (least connections, kept-alive upstream connections, as many as
// the calls in flight), passing gRPC (HTTP/2 both sides) or HTTP/1.1 to
// a REST API, and returns it with its address once it listens.
func startNginx(t testing.TB, dir, nginx string, shardAddrs []string, grpc bool) (*exec.Cmd, string) {
	port := proctest.FreePort(t)
	var upstream strings.Builder
	for _, a := range shardAddrs {
		fmt.Fprintf(&upstream, "    server %s;\n", a)
	}
	server := fmt.Sprintf(`    listen 127.0.0.1:%d;
    location / {
      proxy_pass http://shards;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }`, port)
	if grpc {
		server = fmt.Sprintf(`    listen 127.0.0.1:%d http2;
    http2_max_concurrent_streams 1024;
    location / { grpc_pass grpc://shards; }`, port)
	}
	conf := fmt.Sprintf(`daemon off;
worker_processes 2;
pid %[1]s/nginx-%[4]d.pid;
error_log %[1]s/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  upstream shards {
    least_conn;
%[2]s    keepalive 256;
    keepalive_requests 1000000;
  }
  server {
    keepalive_requests 1000000;
%[3]s
  }
}
`, dir, upstream.String(), server, port)
	file := filepath.Join(dir, fmt.Sprintf("nginx-%d.conf", port))
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := startProcess(t, dir, nginx, "-p", dir, "-c", file, "-e", filepath.Join(dir, "nginx-error.log"))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitListening(t, addr)
	return cmd, addr
}

func waitListening(t testing.TB, addr string) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s", addr)
}

// cpuTime is the CPU time of process pid and of its children (nginx's
// workers are its master's).
func cpuTime(pid int) time.Duration {
	total, _ := procCPU(pid)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil || child == pid {
			continue
		}
		if cpu, parent := procCPU(child); parent == pid {
			total += cpu
		}
	}
	return total
}

// procCPU is one process's CPU time and its parent's pid.
func procCPU(pid int) (time.Duration, int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ppid, _ := strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100, ppid // clock ticks (USER_HZ 100)
}

func dialAll(t testing.TB, addrs []string, n int) []pb.GatewayClient {
	var out []pb.GatewayClient
	for i := range n {
		conn, err := grpc.NewClient(addrs[i%len(addrs)], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		out = append(out, pb.NewGatewayClient(conn))
	}
	return out
}

var benchCreate = &pb.CreateProcessInstanceRequest{BpmnProcessId: "bench", Version: -1}

// benchShards is how many simulated shards the CreateProcessInstance
// benchmarks run behind the proxies.
const benchShards = 3

// startBenchShards starts the simulated shards (--capacity 0, no backlog
// limit) with process, whose id is "bench", deployed on each.
func startBenchShards(t testing.TB, bin string, env []string, process []byte) []*proctest.Process {
	var shards []*proctest.Process
	for range benchShards {
		p := proctest.Start(t, bin, env, "sim", "serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--partitions", "3", "--backlog-limit", "-1")
		deployBench(t, p.Addr, process)
		shards = append(shards, p)
	}
	return shards
}

func deployBench(t testing.TB, addr string, process []byte) {
	req := &pb.DeployResourceRequest{Resources: []*pb.Resource{{Name: "bench.bpmn", Content: process}}}
	if _, err := dialAll(t, []string{addr}, 1)[0].DeployResource(context.Background(), req); err != nil {
		t.Fatalf("deploy to %s: %v", addr, err)
	}
}

// caller makes one call as load goroutine g (of peerConcurrency, or any
// number in an open loop).
type caller func(g int) error

// creates is CreateProcessInstance of the bench process over clients.
func creates(clients []pb.GatewayClient) caller {
	return func(g int) error {
		_, err := clients[g%len(clients)].CreateProcessInstance(context.Background(), benchCreate)
		return err
	}
}

// closedLoop keeps peerConcurrency calls in flight for d.
func closedLoop(call caller, d time.Duration) peerResult {
	var wg sync.WaitGroup
	var errs atomic.Int64
	lat := make([][]time.Duration, peerConcurrency)
	start := time.Now()
	stop := start.Add(d)
	for g := range peerConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1<<16)
			for time.Now().Before(stop) {
				t0 := time.Now()
				if err := call(g); err != nil {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			lat[g] = mine
		}()
	}
	wg.Wait()
	return summarize(lat, time.Since(start), errs.Load())
}

// openLoop sends at a fixed rate for d, whatever the answers take.
func openLoop(call caller, rate float64, d time.Duration) peerResult {
	var wg sync.WaitGroup
	var errs atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	next := start
	// Bounded: past its capacity a target would otherwise pile up
	// goroutines without end; a call that finds no slot counts as an error.
	slots := make(chan struct{}, 4096)
	for i := 0; time.Since(start) < d; i++ {
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
		next = next.Add(interval)
		select {
		case slots <- struct{}{}:
		default:
			errs.Add(1)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			t0 := time.Now()
			err := call(i)
			took := time.Since(t0)
			if err != nil {
				errs.Add(1)
				return
			}
			mu.Lock()
			lat = append(lat, took)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return summarize([][]time.Duration{lat}, time.Since(start), errs.Load())
}

// inTurn is the order of the proxies in a round: each round starts with
// another, since one that always runs after the others would always meet
// a machine they have just worn out (and a noisy neighbour's slow spell
// would always land on the same position).
func inTurn[T any](ts []T, round int) []T {
	k := (round - 1) % len(ts)
	return append(append([]T(nil), ts[k:]...), ts[:k]...)
}

// settle lets what one open-loop run left behind (a pile-up's backlog
// in the shards, the load generator's garbage and goroutines) clear
// before the next target is measured.
func settle() {
	runtime.GC()
	time.Sleep(2 * time.Second)
}

func summarize(lat [][]time.Duration, elapsed time.Duration, errs int64) peerResult {
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := peerResult{rps: float64(len(all)) / elapsed.Seconds(), errors: errs}
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return r
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func BenchmarkPeers(b *testing.B) {
	nginx, haproxy := findTool(b, "nginx"), findTool(b, "haproxy")
	dir := b.TempDir()
	bin := proctest.Build(b)
	// Every shardctl process gets the same CPU share as the peers.
	gomaxprocs := []string{"GOMAXPROCS=2"}

	// A process that ends as it starts: each instance is done and dropped
	// when CreateProcessInstance answers. One that waits on a task nobody
	// works keeps every instance in the simulators' memory, and over the
	// run's millions of calls their heaps grew tenfold: the later a target
	// ran, the slower the machine it met (BenchmarkStateDrift,
	// `make bench-drift`, measures it).
	process := load.Process("bench")
	var shardAddrs []string
	for _, p := range startBenchShards(b, bin, gomaxprocs, process) {
		shardAddrs = append(shardAddrs, p.Addr)
	}

	adminPort := proctest.FreePort(b)
	flags := []string{"--profiling", "--max-inflight-per-shard", "0"}
	px := proctest.Start(b, bin, gomaxprocs, benchProxyArgs(adminPort, shardAddrs, flags...)...)
	proxyCmd, proxyAddr := px.Cmd, px.Addr
	// Another proxy with the same shards and flags, on its own admin port.
	another := func(bin string, more ...string) *proctest.Process {
		return proctest.Start(b, bin, gomaxprocs, benchProxyArgs(proctest.FreePort(b), shardAddrs, append(slices.Clone(flags), more...)...)...)
	}
	// The same proxy on its fallback front, for comparison.
	grpcFront := another(bin, "--front", route.FrontGRPC)
	deployTo := []string{proxyAddr, grpcFront.Addr}
	var base *proctest.Process
	if old := os.Getenv(envBaseline); old != "" {
		base = another(old)
		deployTo = append(deployTo, base.Addr)
	}
	for _, addr := range deployTo {
		deployBench(b, addr, process)
	}

	nginxCmd, nginxAddr := startNginx(b, dir, nginx, shardAddrs, true)
	haproxyCmd, haproxyAddr := startHAProxy(b, dir, haproxy, shardAddrs, "h2")

	targets := []peerTarget{
		{"direct", creates(dialAll(b, shardAddrs, 3*peerConns)), 0},
		{"shardctl", creates(dialAll(b, []string{proxyAddr}, peerConns)), proxyCmd.Process.Pid},
		{"nginx", creates(dialAll(b, []string{nginxAddr}, peerConns)), nginxCmd.Process.Pid},
		{"haproxy", creates(dialAll(b, []string{haproxyAddr}, peerConns)), haproxyCmd.Process.Pid},
		{"grpc-front", creates(dialAll(b, []string{grpcFront.Addr}, peerConns)), grpcFront.Cmd.Process.Pid},
	}
	if base != nil {
		targets = append(targets, peerTarget{"baseline", creates(dialAll(b, []string{base.Addr}, peerConns)), base.Cmd.Process.Pid})
	}
	comparePeers(fmt.Sprintf("CreateProcessInstance, %d in flight, %d simulated shards (--capacity 0), %v per run (targets: throughput >= 1.2x the better peer, CPU per call <= haproxy's)",
		peerConcurrency, benchShards, peerRunTime), targets)
	// Where the proxy's CPU goes under the closed-loop load.
	printProfile(b, bin, adminPort, "under load", func() { closedLoop(targets[1].call, 5*time.Second) })
}

// peerTarget is one way to the shards: "direct" (first), "shardctl"
// (second), "nginx", "haproxy", and any other build or front of
// shardctl; pid is the proxy process whose CPU is counted (0: none).
type peerTarget struct {
	name string
	call caller
	pid  int
}

// comparePeers measures every target in turn, peerRounds rounds of a
// closed loop and then of an open loop at half of direct's saturation,
// and prints each round, the medians, and shardctl's ratios to the peers
// (nginx, haproxy and the better of them): throughput, CPU per call, and
// the p99 it adds over direct.
func comparePeers(title string, targets []peerTarget) {
	for _, tg := range targets {
		closedLoop(tg.call, time.Second) // warm up connections and pools
	}
	results := map[string][]peerResult{}
	fmt.Printf("\n%s\n", title)
	fmt.Printf("%-6s %-10s %10s %10s %10s %8s %12s\n", "ROUND", "TARGET", "REQ/S", "P50", "P99", "ERRORS", "CPU/REQ")
	for round := 1; round <= peerRounds; round++ {
		for _, tg := range append(targets[:1:1], inTurn(targets[1:], round)...) {
			cpu0 := cpuTime(tg.pid)
			if tg.pid == 0 {
				cpu0 = 0
			}
			r := closedLoop(tg.call, peerRunTime)
			if tg.pid != 0 && r.rps > 0 {
				r.cpuPerOp = (cpuTime(tg.pid) - cpu0) / time.Duration(r.rps*peerRunTime.Seconds())
			}
			results[tg.name] = append(results[tg.name], r)
			cpu := "-"
			if r.cpuPerOp > 0 {
				cpu = r.cpuPerOp.String()
			}
			fmt.Printf("%-6d %-10s %10.0f %10v %10v %8d %12s\n", round, tg.name, r.rps, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.errors, cpu)
		}
	}
	med := func(name string, f func(peerResult) float64) float64 {
		var xs []float64
		for _, r := range results[name] {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	rps := func(r peerResult) float64 { return r.rps }
	cpu := func(r peerResult) float64 { return float64(r.cpuPerOp) }
	fmt.Printf("\nmedians of %d rounds:\n", peerRounds)
	for _, tg := range targets {
		fmt.Printf("  %-10s %8.0f req/s  p50 %8v  p99 %8v", tg.name, med(tg.name, rps),
			time.Duration(med(tg.name, func(r peerResult) float64 { return float64(r.p50) })).Round(time.Microsecond),
			time.Duration(med(tg.name, func(r peerResult) float64 { return float64(r.p99) })).Round(time.Microsecond))
		if tg.pid != 0 {
			fmt.Printf("  CPU per call %v", time.Duration(med(tg.name, cpu)).Round(100*time.Nanosecond))
		}
		fmt.Println()
	}
	better := math.Max(med("nginx", rps), med("haproxy", rps))
	fmt.Printf("throughput (medians): shardctl/nginx %.2f  shardctl/haproxy %.2f  shardctl/better-peer %.2f  shardctl/direct %.2f\n",
		med("shardctl", rps)/med("nginx", rps), med("shardctl", rps)/med("haproxy", rps), med("shardctl", rps)/better, med("shardctl", rps)/med("direct", rps))
	// Ratios within a round compare targets measured a few seconds
	// apart, under the same neighbours: their median is the steadier
	// figure when the machine's load drifts between rounds.
	perRound := func(f func(peerResult) float64, better func(a, b float64) float64) []float64 {
		var out []float64
		for i := range peerRounds {
			out = append(out, f(results["shardctl"][i])/better(f(results["nginx"][i]), f(results["haproxy"][i])))
		}
		return out
	}
	printRounds := func(what string, xs []float64) {
		fmt.Printf("  per round, shardctl/better-peer %s:", what)
		for _, x := range xs {
			fmt.Printf(" %.2f", x)
		}
		fmt.Printf("  (median %.2f)\n", median(xs))
	}
	printRounds("throughput", perRound(rps, math.Max))
	cheaper := math.Min(med("nginx", cpu), med("haproxy", cpu))
	fmt.Printf("CPU per call (medians): shardctl/nginx %.2f  shardctl/haproxy %.2f  shardctl/better-peer %.2f\n",
		med("shardctl", cpu)/med("nginx", cpu), med("shardctl", cpu)/med("haproxy", cpu), med("shardctl", cpu)/cheaper)
	printRounds("CPU per call", perRound(cpu, math.Min))
	if len(results["baseline"]) > 0 {
		fmt.Printf("baseline ($%s): shardctl/baseline throughput %.2f, CPU per call %.2f\n", envBaseline,
			med("shardctl", rps)/med("baseline", rps), med("shardctl", cpu)/med("baseline", cpu))
	}

	// Added latency at half of the direct saturation rate, for every proxy:
	// the peers show what this machine allows.
	half := med("direct", rps) / 2
	p99s := map[string][]float64{} // per round; direct's too
	fmt.Printf("\nopen loop at %.0f req/s (half of direct saturation), p50/p99 and calls not sent (no free slot of 4096):\n", half)
	proxies := targets[1:]
	for round := 1; round <= peerRounds; round++ {
		d := openLoop(targets[0].call, half, peerRunTime)
		settle()
		p99s["direct"] = append(p99s["direct"], float64(d.p99))
		fmt.Printf("  round %d: direct %v/%v (%d)", round, d.p50.Round(time.Microsecond), d.p99.Round(time.Microsecond), d.errors)
		for _, tg := range inTurn(proxies, round) {
			r := openLoop(tg.call, half, peerRunTime)
			settle()
			p99s[tg.name] = append(p99s[tg.name], float64(r.p99))
			fmt.Printf(" | %s %v/%v (%d)", tg.name, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.errors)
		}
		fmt.Println()
	}
	added := map[string][]float64{}
	fmt.Print("  median added p99 over direct:")
	for _, tg := range proxies {
		for i, p99 := range p99s[tg.name] {
			added[tg.name] = append(added[tg.name], p99-p99s["direct"][i])
		}
		fmt.Printf(" %s %v", tg.name, time.Duration(median(added[tg.name])).Round(time.Microsecond))
	}
	fmt.Println()
	fmt.Printf("  shardctl's added p99 minus the better peer's: %v\n",
		time.Duration(median(added["shardctl"])-math.Min(median(added["nginx"]), median(added["haproxy"]))).Round(time.Microsecond))
	fmt.Print("  rounds where haproxy added <= 1ms (shardctl's there):")
	none := true
	for i, h := range added["haproxy"] {
		if h <= float64(time.Millisecond) {
			none = false
			fmt.Printf(" round %d shardctl %v", i+1, time.Duration(added["shardctl"][i]).Round(time.Microsecond))
		}
	}
	if none {
		fmt.Print(" none")
	}
	fmt.Println()
	// The direct run's own tail spikes on a busy machine, and a round's
	// difference then says more of that spike than of the proxy: the
	// medians of the p99s, and their differences, beside it.
	directP99 := median(p99s["direct"])
	fmt.Printf("  median p99: direct %v", time.Duration(directP99).Round(time.Microsecond))
	for _, tg := range proxies {
		m := median(p99s[tg.name])
		sign := ""
		if m >= directP99 {
			sign = "+"
		}
		fmt.Printf(" | %s %v (%s%v)", tg.name, time.Duration(m).Round(time.Microsecond), sign, time.Duration(m-directP99).Round(time.Microsecond))
	}
	fmt.Println()
}

// benchProxyArgs is `shardctl proxy serve` on a free listen port with
// its admin endpoint on adminPort, shards s1, s2, ... at shardAddrs, and
// more flags.
func benchProxyArgs(adminPort int, shardAddrs []string, more ...string) []string {
	args := []string{"proxy", "serve", "--listen", "127.0.0.1:0", "--admin", fmt.Sprintf("127.0.0.1:%d", adminPort)}
	for i, a := range shardAddrs {
		args = append(args, "--shard", fmt.Sprintf("s%d=%s", i+1, a))
	}
	return append(args, more...)
}

// printProfile prints the top of a 4 s CPU profile of the proxy on
// adminPort (run with --profiling) taken while run runs.
func printProfile(t testing.TB, bin string, adminPort int, what string, run func()) {
	profile := filepath.Join(os.TempDir(), "shardctl-proxy-cpu.pprof")
	done := make(chan struct{})
	go func() {
		defer close(done)
		run()
	}()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=4", adminPort))
	if err == nil {
		f, _ := os.Create(profile)
		_, _ = io.Copy(f, resp.Body)
		f.Close()
		resp.Body.Close()
	}
	<-done
	if out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=30", bin, profile).CombinedOutput(); err == nil {
		fmt.Printf("\nproxy CPU profile %s (%s):\n%s", what, profile, out)
	}
}
