package route

import (
	"context"
	"testing"
	"time"

	"github.com/shardctl/shardctl/internal/budget"
)

// startCore opens a routing core on cfg's shards and runs its loops, with no
// front: what routing alone decides. It is stopped when the test ends.
func startCore(t testing.TB, cfg Config) *Core {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Run(context.Background(), nil, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), budget.Of(time.Second))
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}
