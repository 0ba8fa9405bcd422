package http1

import (
	"os"
	"testing"

	"github.com/shardctl/shardctl/internal/proctest"
)

// TestMain fails the package if a goroutine outlives its tests: a long
// poll must end with its request or the simulator.
func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }
