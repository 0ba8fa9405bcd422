//go:build !unix

package procs

import "time"

// processCPU is nil where the system does not say what CPU the process
// used: there the Sizer does not start.
var processCPU func() time.Duration
