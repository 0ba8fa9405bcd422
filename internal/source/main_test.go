package source_test

import (
	"os"
	"testing"

	"github.com/shardctl/shardctl/internal/proctest"
)

// TestMain removes the shardctl binary the integration tests built.
func TestMain(m *testing.M) { os.Exit(proctest.Main(m)) }
