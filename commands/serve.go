package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sort"
	"time"

	"github.com/spf13/cobra"
)

// collectLessOften raises the GC target of a runtime that serves many
// small, short-lived requests (the proxy, the registry, the probe that
// loads one): collecting less often buys throughput and shorter tails for
// a little memory. GOGC, when set, wins.
func collectLessOften() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

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
		GroupID: "runtime",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return Usagef("missing subcommand: use serve")
		},
	}
	cmd.AddCommand(serve)
	return cmd
}
