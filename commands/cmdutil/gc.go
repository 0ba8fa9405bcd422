package cmdutil

import (
	"os"
	"runtime/debug"
)

// CollectLessOften raises the GC target of a runtime that serves many
// small, short-lived requests (the proxy, the registry, the probe that
// loads one): collecting less often buys throughput and shorter tails for
// a little memory. GOGC, when set, wins.
func CollectLessOften() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}
