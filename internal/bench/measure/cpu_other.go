//go:build !unix

package bench

import "time"

// processCPU is not measured here: the CPU figures are left out.
func processCPU() (time.Duration, bool) { return 0, false }
