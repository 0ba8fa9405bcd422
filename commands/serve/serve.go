package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/logs"
)

// checkListenFlags rejects a listen flag that is not HOST:PORT.
func checkListenFlags(addrs map[string]string) error {
	flags := make([]string, 0, len(addrs))
	for f := range addrs {
		flags = append(flags, f)
	}
	sort.Strings(flags) // the same flag is named first every time
	for _, f := range flags {
		if _, _, err := net.SplitHostPort(addrs[f]); err != nil {
			return fmt.Errorf("%s %q: want HOST:PORT, e.g. 127.0.0.1:0", f, addrs[f])
		}
	}
	return nil
}

// logFlags are --log-level and --log-format, which every serve command
// takes: the runtime's log lines go to stderr after its first lines.
type logFlags struct{ level, format string }

func (l *logFlags) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&l.level, "log-level", logs.DefaultLevel, "the least severe log lines written (one per state change, on stderr): "+strings.Join(logs.Levels, ", "))
	f.StringVar(&l.format, "log-format", logs.DefaultFormat, "log lines as "+strings.Join(logs.Formats, " (key=value) or ")+" (one object a line)")
	_ = cmd.RegisterFlagCompletionFunc("log-level", completions.Values(logs.Levels...))
	_ = cmd.RegisterFlagCompletionFunc("log-format", completions.Values(logs.Formats...))
}

func (l *logFlags) validate() error {
	if _, err := logs.New(io.Discard, l.level, l.format); err != nil {
		return fmt.Errorf("--log-%w", err) // `level "x": want …` names the flag
	}
	return nil
}

// logger is the runtime's logger on errOut, held until announce has
// written the command's first lines (open it on the way out too, so a
// failed start still shows what was logged).
func (l *logFlags) logger(errOut io.Writer) (*slog.Logger, *logs.Held) {
	held := logs.Hold(errOut)
	log, _ := logs.New(held, l.level, l.format) // validated
	return log, held
}

// announce writes a serve command's first stderr lines, "listening on
// HOST:PORT" first as docs/output.md promises, then lets the runtime's
// log lines through, those it wrote while starting first.
func announce(errOut io.Writer, held *logs.Held, addr net.Addr, more ...string) {
	fmt.Fprintf(errOut, "listening on %s\n", addr)
	for _, line := range more {
		fmt.Fprintln(errOut, line)
	}
	_ = held.Open()
}

// restLine is the announce line of a REST API's address.
func restLine(addr net.Addr, tls bool) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return fmt.Sprintf("REST API on %s://%s/v2", scheme, addr)
}

// serveUntilDone keeps a started runtime up until ctx ends (SIGTERM or
// SIGINT) or it reports a failure on failed (nil: it cannot), then stops
// it gracefully within timeout: the shape every `serve` command shares.
func serveUntilDone(ctx context.Context, errOut io.Writer, what string, timeout time.Duration, failed <-chan error, stop func(context.Context) error) error {
	var cause error
	select {
	case <-ctx.Done():
	case cause = <-failed:
		fmt.Fprintf(errOut, "%s: %v\n", what, cause)
	}
	fmt.Fprintln(errOut, "stopping: finishing in-flight calls")
	stopCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := stop(stopCtx); err != nil {
		return errors.Join(cause, fmt.Errorf("stop the %s: %w", what, err))
	}
	fmt.Fprintln(errOut, "stopped")
	return cause
}

// newRuntimeGroup is the parent of a runtime's `serve`: `shardctl proxy`,
// `registry`, `sim`.
func newRuntimeGroup(use, short, long string, serve *cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Long:    long,
		GroupID: cmdutil.GroupRuntime,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return cmdutil.Usagef("missing subcommand: use serve")
		},
	}
	cmd.AddCommand(serve)
	return cmd
}
