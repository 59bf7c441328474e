//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package broker

import "os"

// Without flock the data directory is not guarded: two nodes on one
// directory are the operator's mistake to avoid.
func tryLockFile(*os.File) (bool, error) { return true, nil }

func unlockFile(*os.File) error { return nil }
