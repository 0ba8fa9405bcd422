// Package proctest runs the shardctl binary as processes for integration
// tests: built per test, started on 127.0.0.1 ports picked at run time,
// known by the "listening on HOST:PORT" line every runtime prints first,
// and stopped when the test ends.
package proctest

import (
	"bufio"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Build builds cmd/shardctl into the test's temporary folder.
func Build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "shardctl")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/shardctl/shardctl/cmd/shardctl").CombinedOutput(); err != nil {
		t.Fatalf("build shardctl: %v\n%s", err, out)
	}
	return bin
}

// FreePort is a TCP port free on 127.0.0.1 a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Process is a running shardctl runtime.
type Process struct {
	Cmd *exec.Cmd
	// Addr is what its "listening on" line named.
	Addr string

	mu      sync.Mutex
	log     strings.Builder
	done    chan struct{}
	waitErr error
}

// Start runs `bin ARGS` with env added to the test's environment, waits
// for its "listening on" line (20 s at most) and stops it when the test
// ends: SIGTERM, then SIGKILL after 5 s.
func Start(t testing.TB, bin string, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{Cmd: exec.Command(bin, args...), done: make(chan struct{})}
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
	first := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			line := lines.Text()
			if after, ok := strings.CutPrefix(line, "listening on "); ok {
				select {
				case first <- after:
				default:
				}
			}
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
		}
		p.waitErr = p.Cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.Stop)
	select {
	case p.Addr = <-first:
	case <-p.done:
		t.Fatalf("shardctl %v ended before listening:\n%s", args, p.Stderr())
	case <-time.After(20 * time.Second):
		t.Fatalf("shardctl %v printed no listening line within 20 s:\n%s", args, p.Stderr())
	}
	return p
}

// Stderr is what the process wrote to stderr so far.
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Stop asks the process to end (SIGTERM) and kills it after 5 s.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.Kill()
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
