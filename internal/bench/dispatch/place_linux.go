//go:build linux

package dispatch

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// childAttr makes a child process get SIGKILL when its parent dies. The
// signal follows the thread that started the child, so the caller keeps
// that goroutine locked to its thread until the child is reaped.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// place pins every thread of this process to cpus (none: left as it is)
// and sets their nice value (0: left as it is). Linux keeps both per
// thread, and a new thread inherits them from the one that made it, so
// the threads are walked until a pass finds none it has not placed.
func place(cpus []int, nice int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	done := map[int]bool{}
	for pass := 0; pass < 16; pass++ {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			done[tid], fresh = true, true
			if len(cpus) > 0 {
				if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
					return fmt.Errorf("pin to CPU %v: %w", cpus, err)
				}
			}
			if nice != 0 {
				if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && err != unix.ESRCH {
					return fmt.Errorf("nice %d: %w", nice, err)
				}
			}
		}
		if !fresh {
			return nil
		}
	}
	return nil
}
