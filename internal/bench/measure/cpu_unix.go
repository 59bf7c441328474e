//go:build unix

package measure

import (
	"syscall"
	"time"
)

// CPUTime is the CPU time the process has used, user and system; false
// where the platform does not say.
func CPUTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
