package registry

import (
	"os"
	"testing"

	"github.com/shardctl/shardctl/internal/proctest"
)

// TestMain removes the shardctl binary the integration tests built, and
// fails the package if a goroutine outlives its tests.
func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }
