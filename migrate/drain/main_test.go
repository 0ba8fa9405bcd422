package drain_test

import (
	"os"
	"testing"

	"github.com/shardctl/shardctl/internal/proctest"
)

// TestMain fails the package if a goroutine outlives its tests: the drain
// runs registries and simulators in-process.
func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }
