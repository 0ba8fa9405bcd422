package registryclient

import (
	"os"
	"testing"

	"github.com/shardctl/shardctl/internal/proctest"
)

// TestMain fails the package if a goroutine outlives its tests.
func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }
