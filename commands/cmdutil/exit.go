package cmdutil

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes of the CLI contract (docs/cli.md). Scripts depend on them.
const (
	ExitOK       = 0
	ExitFailure  = 1 // bad input, unreachable service
	ExitUsage    = 2 // unknown command or flag, bad flag value or combination
	ExitRefused  = 3 // a gate or check refused
	ExitTimedOut = 4 // timed out waiting (drain, cutover)
	ExitPaused   = 5 // cutover paused, waiting for cutover promote
	ExitUnknown  = 6 // inconclusive: a gate with no data under noData: inconclusive
)

// ExitError carries the exit code an error should end the process with.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// UsageError marks err as a usage error (exit 2): the command line itself
// was wrong, and help will say how to write it.
func UsageError(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: ExitUsage, Err: err}
}

// Usagef is UsageError with a formatted message.
func Usagef(format string, a ...any) error { return UsageError(fmt.Errorf(format, a...)) }

// Refused marks err as a gate or check that refused (exit 3).
func Refused(err error) error { return &ExitError{Code: ExitRefused, Err: err} }

// TimedOut marks err as a wait that ran out of time (exit 4).
func TimedOut(err error) error { return &ExitError{Code: ExitTimedOut, Err: err} }

// cobraUsagePrefixes are the starts of the errors cobra itself returns for
// a command line it cannot parse; cobra has no error types for them.
var cobraUsagePrefixes = []string{
	"unknown command",
	"unknown flag",
	"unknown shorthand flag",
	"flag needs an argument",
	"invalid argument",
	"required flag(s)",
	"if any flags in the group",
	"accepts ",
	"requires at least",
	"requires at most",
	"invalid args",
	"bad flag syntax",
}

// CodeOf maps an error to the process exit code.
func CodeOf(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	msg := err.Error()
	for _, p := range cobraUsagePrefixes {
		if strings.HasPrefix(msg, p) {
			return ExitUsage
		}
	}
	return ExitFailure
}

// ExactArgs wants n arguments and names what is missing, as a usage error.
func ExactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < n:
			return Usagef("%s: missing %s", cmd.CommandPath(), what)
		case len(args) > n:
			return Usagef("%s: want %s, got %d arguments: %q", cmd.CommandPath(), what, len(args), args)
		}
		return nil
	}
}
