package proctest

import (
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/x/vt"
	"github.com/creack/pty"

	"github.com/shardctl/shardctl/internal/budget"
)

// Terminal runs a command in a pseudo-terminal of a size and keeps the
// screen a user would see, through a terminal emulator that also answers
// the program's questions to its terminal: what `top` and `demo` draw is
// tested as it is drawn.
type Terminal struct {
	cmd     *exec.Cmd
	pty     io.ReadWriteCloser
	done    chan struct{}
	waitErr error
	wg      sync.WaitGroup

	// mu guards the emulator's screen: vt's SafeEmulator leaves String
	// unlocked. Its answers are a pipe of its own, read without it.
	mu sync.Mutex
	em *vt.Emulator
}

// StartTerminal runs `bin ARGS` (env added to the test's) in a terminal
// of cols × rows, stopped when the test ends: q, then SIGTERM, then
// SIGKILL.
func StartTerminal(t testing.TB, bin string, env []string, cols, rows int, args ...string) *Terminal {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cmd.Environ(), append([]string{"TERM=xterm-256color"}, env...)...)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)})
	if err != nil {
		t.Fatalf("start %v in a terminal: %v", args, err)
	}
	tm := &Terminal{cmd: cmd, pty: f, em: vt.NewEmulator(cols, rows), done: make(chan struct{})}
	tm.wg.Go(func() { _, _ = io.Copy(screenWriter{tm}, f) }) // the screen
	tm.wg.Go(func() { _, _ = io.Copy(f, tm.em) })            // the terminal's answers
	go func() {
		tm.waitErr = cmd.Wait()
		close(tm.done)
	}()
	t.Cleanup(func() {
		tm.Type("q")
		select {
		case <-tm.done:
		case <-time.After(budget.Of(3 * time.Second)):
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-tm.done:
			case <-time.After(budget.Of(5 * time.Second)):
				_ = cmd.Process.Kill()
				<-tm.done
			}
		}
		// The copies end with the terminal: closing it ends the screen's;
		// closing the pipe of the emulator's answers ends the other (its
		// Close would set a flag its Read reads unlocked).
		_ = f.Close()
		if answers, ok := tm.em.InputPipe().(io.Closer); ok {
			_ = answers.Close()
		}
		tm.wg.Wait()
	})
	return tm
}

// screenWriter draws what the program writes on the screen.
type screenWriter struct{ tm *Terminal }

func (w screenWriter) Write(p []byte) (int, error) {
	w.tm.mu.Lock()
	defer w.tm.mu.Unlock()
	return w.tm.em.Write(p)
}

// Screen is the text on the screen now, without colour.
func (tm *Terminal) Screen() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.em.String()
}

// Type sends keys as typed.
func (tm *Terminal) Type(keys string) { _, _ = tm.pty.Write([]byte(keys)) }

// Done is closed once the program has exited.
func (tm *Terminal) Done() <-chan struct{} { return tm.done }

// Exit waits (budget.Of limit at most) for the program to end and says
// how it ended: nil for exit 0.
func (tm *Terminal) Exit(t testing.TB, limit time.Duration) error {
	t.Helper()
	select {
	case <-tm.done:
		return tm.waitErr
	case <-time.After(budget.Of(limit)):
		t.Fatalf("still running %v later:\n%s", budget.Of(limit).Round(time.Second), tm.Screen())
		return nil
	}
}

// WaitFor waits (budget.Of limit at most) until the screen holds every
// text, and returns it.
func (tm *Terminal) WaitFor(t testing.TB, limit time.Duration, texts ...string) string {
	t.Helper()
	deadline := time.Now().Add(budget.Of(limit))
	for {
		screen := tm.Screen()
		missing := ""
		for _, text := range texts {
			if !strings.Contains(screen, text) {
				missing = text
				break
			}
		}
		if missing == "" {
			return screen
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screen lacks %q after %v:\n%s", missing, budget.Of(limit).Round(time.Second), screen)
		}
		select {
		case <-tm.done:
			t.Fatalf("the program ended; its last screen lacks %q:\n%s", missing, tm.Screen())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
