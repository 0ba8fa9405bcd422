// Package logstest captures a runtime's log lines in tests, as JSON, and
// finds the lines a state change must have written.
// Tests only: no runtime or tool imports it outside its tests.
package logstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

// Line is one log line: "msg", "level" and the fields.
type Line map[string]any

// Lines collects every line a logger writes, at every level.
type Lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// New is a logger writing JSON lines, from debug up, to the Lines it
// returns.
func New() (*slog.Logger, *Lines) {
	l := &Lines{}
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})), l
}

func (l *Lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// All is every line so far; a line that is not JSON fails the test.
func (l *Lines) All(t testing.TB) []Line {
	t.Helper()
	l.mu.Lock()
	text := l.buf.String()
	l.mu.Unlock()
	var out []Line
	for _, s := range strings.Split(text, "\n") {
		if s == "" {
			continue
		}
		var line Line
		if err := json.Unmarshal([]byte(s), &line); err != nil {
			t.Fatalf("a log line is not JSON: %v: %q", err, s)
		}
		out = append(out, line)
	}
	return out
}

// Find is the lines with message msg and the fields given as key, value
// pairs (compared as text: 2 matches the JSON number 2).
func (l *Lines) Find(t testing.TB, msg string, fields ...any) []Line {
	t.Helper()
	var out []Line
	for _, line := range l.All(t) {
		if line["msg"] == msg && line.Has(fields...) {
			out = append(out, line)
		}
	}
	return out
}

// Has reports whether the line has every key, value pair given.
func (line Line) Has(fields ...any) bool {
	for i := 0; i+1 < len(fields); i += 2 {
		v, ok := line[fmt.Sprint(fields[i])]
		if !ok || fmt.Sprint(v) != fmt.Sprint(fields[i+1]) {
			return false
		}
	}
	return true
}

// Wait waits (budget.Of d at most) for a line Find would find, and
// returns the first.
func (l *Lines) Wait(t testing.TB, d time.Duration, msg string, fields ...any) Line {
	t.Helper()
	var found []Line
	if err := budget.Wait(budget.Of(d), func() bool { found = l.Find(t, msg, fields...); return len(found) > 0 }); err != nil {
		t.Fatalf("no log line %q with %v within %v; the log:\n%s", msg, fields, budget.Of(d), l)
	}
	return found[0]
}

// String is the log so far.
func (l *Lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
