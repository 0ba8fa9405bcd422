package output

import (
	"io"
	"os"
	"strings"

	"github.com/mattn/go-isatty"
)

// Colors highlights words in human output. The zero value prints plain text.
type Colors struct {
	Enabled bool
}

// ColorDecision says whether out should be coloured: only when it is a
// terminal, never with --no-color, a non-empty NO_COLOR (no-color.org) or
// TERM=dumb.
func ColorDecision(out io.Writer, noColorFlag bool, getenv func(string) string) Colors {
	if noColorFlag || getenv("NO_COLOR") != "" || getenv("TERM") == "dumb" {
		return Colors{}
	}
	f, ok := out.(*os.File)
	if !ok {
		return Colors{}
	}
	fd := f.Fd()
	return Colors{Enabled: isatty.IsTerminal(fd) || isatty.IsCygwinTerminal(fd)}
}

const (
	green  = "\x1b[32m"
	yellow = "\x1b[33m"
	red    = "\x1b[31m"
	bold   = "\x1b[1m"
	reset  = "\x1b[0m"
)

func (c Colors) wrap(code, s string) string {
	if !c.Enabled || s == "" {
		return s
	}
	return code + s + reset
}

// Good, Warn, Bad and Bold colour a word.
func (c Colors) Good(s string) string { return c.wrap(green, s) }
func (c Colors) Warn(s string) string { return c.wrap(yellow, s) }
func (c Colors) Bad(s string) string  { return c.wrap(red, s) }
func (c Colors) Bold(s string) string { return c.wrap(bold, s) }

// State colours a shard or check state by what it means to an operator.
func (c Colors) State(s string) string {
	switch strings.ToUpper(s) {
	case "UP", "OK", "PASS", "READY", "HEALTHY":
		return c.Good(s)
	case "DRAINING", "STARTING", "WARN", "WARNING", "DEGRADED":
		return c.Warn(s)
	case "DOWN", "OUT_OF_SERVICE", "FAIL", "FAILED", "CRITICAL", "UNKNOWN":
		return c.Bad(s)
	}
	return s
}
