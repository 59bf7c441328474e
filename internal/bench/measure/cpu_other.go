//go:build !unix

package measure

import "time"

// CPUTime is not measured here: the CPU figures are left out.
func CPUTime() (time.Duration, bool) { return 0, false }
