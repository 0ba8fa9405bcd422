// Package proctest runs the shardctl binary as processes for integration
// tests: built once before the clocks start, started on 127.0.0.1 ports
// picked at run time, known by the "listening on HOST:PORT" line every
// runtime prints first, and stopped when the test ends.
// Tests only: no runtime or tool imports it outside its tests.
package proctest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/shardctl/shardctl/internal/budget"
)

// EnvBinary names a shardctl binary built before the tests started (make
// test builds one), so no test's clock runs while the compiler competes
// for the cores.
const EnvBinary = "SHARDCTL_TEST_BINARY"

var built struct {
	once sync.Once
	path string
	dir  string // ours to remove, when we built it
	err  error
}

// Main runs the package's tests, then fails them if a goroutine is still
// running (a runtime's Close that returns before what it started has
// stopped, a test that forgot a Close), and removes the binary Build
// made. Every runtime package and every package that calls Build has
// `func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }`.
func Main(m *testing.M) int {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines still running after the tests ended: something was not closed, or its Close does not wait for what it started\n%v\n", err)
			return 1
		}
	}
	return code
}

// leakOptions are goroutines that outlive a test by design, not by leak.
var leakOptions = []goleak.Option{}

// Build is the shardctl binary the tests run: $SHARDCTL_TEST_BINARY, else
// cmd/shardctl built once per test process into a temporary folder that
// lives as long as the process (call it before starting a test's clock).
func Build(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		if p := os.Getenv(EnvBinary); p != "" {
			if _, err := os.Stat(p); err != nil {
				built.err = fmt.Errorf("$%s: %w", EnvBinary, err)
			}
			built.path = p
			return
		}
		dir, err := os.MkdirTemp("", "shardctl-test-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.dir, built.path = dir, filepath.Join(dir, "shardctl")
		if out, err := exec.Command("go", "build", "-o", built.path, "github.com/shardctl/shardctl/cmd/shardctl").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("build shardctl: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// Tool is the path of a tool scripts/tools.sh pins: $env when set,
// else the copy the script builds once per machine from the Go module
// proxy.
func Tool(t testing.TB, name, env string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "tools.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", script, name).Output()
	if err != nil {
		t.Fatalf("build %s with scripts/tools.sh: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// FreePort is a TCP port free on 127.0.0.1 a moment ago, and never one
// it gave before in this process: ports picked together for processes
// not started yet are distinct.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
}

// TCPPair is a connected pair of TCP connections on 127.0.0.1: the one
// that dialled and the one that was accepted. Both close when the test
// ends.
func TCPPair(t testing.TB) (dialed, accepted *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			close(got)
			return
		}
		got <- nc
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	other, ok := <-got
	if !ok {
		nc.Close()
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { nc.Close(); other.Close() })
	return nc.(*net.TCPConn), other.(*net.TCPConn)
}

// Process is a running shardctl runtime.
type Process struct {
	Cmd *exec.Cmd
	// Addr is what its "listening on" line named.
	Addr string

	mu      sync.Mutex
	lines   []string
	grew    chan struct{} // closed and replaced when a line arrives
	done    chan struct{}
	waitErr error
}

// Start runs `bin ARGS` with env added to the test's environment, waits
// for its "listening on" line (budget.Of 20 s at most) and stops it when
// the test ends: SIGTERM, then SIGKILL after budget.Of 5 s.
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin, args...), grew: make(chan struct{}), done: make(chan struct{})}
	if len(env) > 0 {
		p.Cmd.Env = append(p.Cmd.Environ(), env...)
	}
	stderr, err := p.Cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start shardctl %v: %v", args, err)
	}
	go func() {
		lines := bufio.NewScanner(stderr)
		lines.Buffer(nil, 1<<20)
		for lines.Scan() {
			p.add(lines.Text())
		}
		if err := lines.Err(); err != nil {
			// Read on whatever: a pipe nobody reads kills the process
			// with SIGPIPE at its next write, a failure not its own.
			p.add(fmt.Sprintf("proctest: stderr no longer read as lines: %v", err))
			_, _ = io.Copy(io.Discard, stderr)
		}
		p.waitErr = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
			// It ended before the test did: say how, whatever the test
			// concluded of it.
			t.Logf("%v had ended before the test: %v; its stderr:\n%s", args, p.waitErr, p.tail(20))
		default:
		}
		p.Stop()
	})
	p.Addr = p.Line(t, "listening on ")
	return p
}

// Line waits (budget.Of 20 s at most) for the first stderr line that
// starts with prefix and returns the rest of it.
func (p *Process) Line(t testing.TB, prefix string) string {
	t.Helper()
	limit := time.After(budget.Of(20 * time.Second))
	for seen := 0; ; {
		p.mu.Lock()
		lines, grew := p.lines, p.grew
		p.mu.Unlock()
		for ; seen < len(lines); seen++ {
			if rest, ok := strings.CutPrefix(lines[seen], prefix); ok {
				return rest
			}
		}
		select {
		case <-grew:
		case <-p.done:
			t.Fatalf("%v ended before printing %q: %v\n%s", p.Cmd.Args, prefix, p.waitErr, p.Stderr())
		case <-limit:
			t.Fatalf("%v printed no %q line within %v:\n%s", p.Cmd.Args, prefix, budget.Of(20*time.Second).Round(time.Second), p.Stderr())
		}
	}
}

func (p *Process) add(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, line)
	close(p.grew)
	p.grew = make(chan struct{})
}

// tail is the last n lines of stderr.
func (p *Process) tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines[max(0, len(p.lines)-n):], "\n")
}

// Stderr is what the process wrote to stderr so far.
func (p *Process) Stderr() string { return p.tail(math.MaxInt) }

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Stop asks the process to end (SIGTERM) and kills it after budget.Of 5 s.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(budget.Of(5 * time.Second)):
		p.Kill()
	}
}

// Terminate stops the process as Kubernetes does (SIGTERM) and fails the
// test unless it exits cleanly (code 0) within budget.Of 15 s.
func (p *Process) Terminate(t testing.TB) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.waitErr != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", p.waitErr, p.Stderr())
		}
	case <-time.After(budget.Of(15 * time.Second)):
		t.Fatalf("did not stop within %v of SIGTERM", budget.Of(15*time.Second).Round(time.Second))
	}
}

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process ended (valid once Done is closed), e.g.
// "signal: killed".
func (p *Process) Err() error {
	<-p.done
	return p.waitErr
}

// Prometheus runs the Debian package's prometheus on listen (a free port
// when empty), scraping every target (cluster label → HOST:PORT) each
// second with its cluster label, until the test ends; it returns its URL
// once /-/ready answers.
func Prometheus(t testing.TB, listen string, targets map[string]string) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is not installed: make test installs the Debian package prometheus (scripts/install-debs.sh prometheus)")
	}
	dir := t.TempDir()
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n- job_name: zeebe\n  static_configs:\n")
	for cluster, addr := range targets {
		fmt.Fprintf(&cfg, "  - targets: [%q]\n    labels: {cluster: %q}\n", addr, cluster)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if listen == "" {
		listen = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	logs := &LockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(budget.Of(10 * time.Second)):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	url := "http://" + listen
	ready := func() bool {
		resp, err := http.Get(url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if err := budget.Wait(budget.Of(30*time.Second), ready); err != nil {
		t.Fatalf("prometheus not ready: %v\n%s", err, logs.String())
	}
	return url
}

// WaitScraped waits until the Prometheus server at url has scraped n
// targets at least once, so that a test's first query sees them all.
func WaitScraped(t testing.TB, url string, n int) {
	t.Helper()
	budget.Eventually(t, 30*time.Second, fmt.Sprintf("Prometheus to scrape %d targets", n), func() bool {
		resp, err := http.Get(url + "/api/v1/query?query=up")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var r struct{ Data struct{ Result []any } }
		return json.NewDecoder(resp.Body).Decode(&r) == nil && len(r.Data.Result) == n
	})
}

// LockedBuffer collects a process's output while the test may read it
// (proctest's processes, pgtest's server).
type LockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
