package serve

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A runtime that fails while it serves stops the command with its error,
// after a graceful stop; a signal stops it with none.
func TestServeUntilDone(t *testing.T) {
	broken := errors.New("serve clients: accept: too many open files")
	for _, tc := range []struct {
		name   string
		failed error // nil: the context ends instead
	}{{"signal", nil}, {"runtime failure", broken}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			failed := make(chan error, 1)
			if tc.failed != nil {
				failed <- tc.failed
			} else {
				cancel()
			}
			defer cancel()
			stopped := false
			var out strings.Builder
			err := serveUntilDone(ctx, &out, "proxy", time.Second, failed, func(context.Context) error { stopped = true; return nil })
			if !errors.Is(err, tc.failed) || (tc.failed == nil) != (err == nil) || !stopped {
				t.Errorf("err %v, stopped %v; want %v after a graceful stop\n%s", err, stopped, tc.failed, out.String())
			}
		})
	}
}
