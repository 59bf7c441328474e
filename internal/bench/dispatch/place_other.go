//go:build !linux

package dispatch

import (
	"errors"
	"runtime"
	"syscall"
)

var errPlaceUnsupported = errors.New("not supported on " + runtime.GOOS)

// childAttr sets nothing here: children notice their parent's end by their
// stdin closing.
func childAttr() *syscall.SysProcAttr { return nil }

func allowedCPUs() ([]int, error) { return nil, errPlaceUnsupported }

// place does nothing here: pinning and nice are left out, and the report
// says so.
func place(cpus []int, nice int) error {
	if len(cpus) == 0 && nice == 0 {
		return nil
	}
	return errPlaceUnsupported
}
