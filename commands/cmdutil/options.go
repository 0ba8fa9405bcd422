package cmdutil

import (
	"context"
	"errors"

	"github.com/spf13/cobra"
)

// Options is the shape of every command.
type Options interface {
	Complete(cmd *cobra.Command, args []string) error
	Validate() error
	Run(ctx context.Context) error
}

// RunOptions wires an Options into cobra. A Validate error is a usage error.
func RunOptions(o Options) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if err := o.Complete(cmd, args); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			var ee *ExitError
			if errors.As(err, &ee) {
				return err
			}
			return UsageError(err)
		}
		return o.Run(cmd.Context())
	}
}

// The command groups' IDs; root.go orders and titles them for help.
const (
	GroupRuntime = "runtime"
	GroupOperate = "operate"
	GroupObserve = "observe"
	GroupOther   = "other"
)
