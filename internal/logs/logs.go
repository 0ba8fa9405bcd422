// Package logs gives the runtimes (proxy, registry, simulator) their
// structured log: one log/slog line per state change, with the fields an
// operator greps for, as etcd logs. It builds the logger the serve
// commands' --log-level and --log-format ask for, holds its lines until
// the command has announced where it listens, and keeps a line that can
// repeat many times a second from flooding the log (Repeats).
// Every runtime uses it, so it imports no runtime and none of the tools.
package logs

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Levels and Formats are the values of --log-level and --log-format.
var (
	Levels  = []string{"debug", "info", "warn", "error"}
	Formats = []string{"text", "json"}
)

// Defaults of --log-level and --log-format.
const (
	DefaultLevel  = "info"
	DefaultFormat = "text"
)

// New is a logger writing lines of level and above to w, as text
// (key=value) or as JSON (one object a line).
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	lv, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("format %q: want %s", format, strings.Join(Formats, " or "))
}

// ParseLevel reads one of Levels.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("level %q: want %s", s, strings.Join(Levels, ", "))
}

// Discard is the logger of a runtime given none: it writes nothing.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Or is l, or Discard when l is nil: a Config's default.
func Or(l *slog.Logger) *slog.Logger {
	if l == nil {
		return Discard()
	}
	return l
}
