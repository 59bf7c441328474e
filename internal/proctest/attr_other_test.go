//go:build unix && !linux

package proctest

import "syscall"

// childAttr: only Linux can tie a child's life to its parent's; elsewhere
// the tests' cleanups kill the nodes.
func childAttr() *syscall.SysProcAttr { return nil }
