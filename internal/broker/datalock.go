package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrDataDirInUse matches a Start refused because another process (or
// another Server in this one) holds the data directory.
var ErrDataDirInUse = errors.New("broker: data directory in use")

// dataLockFile is the file in the data directory whose lock a running node
// holds; it contains the node's PID, for the error of the next one.
const dataLockFile = "semaq.lock"

// dataLock is a data directory held by this node, from Start to the end of
// its stop. The kernel releases it if the process dies, so a crash leaves
// nothing to clean up; the file itself stays.
type dataLock struct {
	f    *os.File
	path string
}

// dataDirInUseError names the directory and, if the lock file says, the PID
// of its holder.
type dataDirInUseError struct {
	dir string
	pid int // 0: unknown
}

func (e *dataDirInUseError) Error() string {
	holder := "another semaq"
	if e.pid > 0 {
		holder = fmt.Sprintf("another semaq (pid %d)", e.pid)
	}
	return fmt.Sprintf("broker: data directory %s is in use by %s; stop it, or give this one another --data", e.dir, holder)
}

func (e *dataDirInUseError) Is(target error) bool { return target == ErrDataDirInUse }

// lockDataDir takes the data directory for this node, creating it if
// needed, and fails at once if another node holds it.
func lockDataDir(dir string) (*dataLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: data directory: %w", err)
	}
	path := filepath.Join(dir, dataLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("broker: data directory lock: %w", err)
	}
	held, err := tryLockFile(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("broker: data directory lock %s: %w", path, err)
	}
	if !held {
		abs, aerr := filepath.Abs(dir)
		if aerr != nil {
			abs = dir
		}
		pid := readLockPID(f)
		f.Close()
		return nil, &dataDirInUseError{dir: abs, pid: pid}
	}
	// Ours now: say whose, for the error of the next one.
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt(pid, 0)
	}
	return &dataLock{f: f, path: path}, nil
}

// readLockPID reads the PID a holder wrote; 0 if there is none.
func readLockPID(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// release gives the directory up. The file is left in place: removing it
// would let a node that opened it meanwhile lock a file nobody else sees.
func (l *dataLock) release() error {
	_ = l.f.Truncate(0)
	if err := unlockFile(l.f); err != nil {
		l.f.Close()
		return fmt.Errorf("broker: releasing %s: %w", l.path, err)
	}
	return l.f.Close()
}
