package proctest

import "syscall"

// childAttr makes the kernel kill a node when the test process dies, so
// an interrupted run leaves no node behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
