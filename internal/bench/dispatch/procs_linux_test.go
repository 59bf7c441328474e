package dispatch

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gone reports whether pid has ended: no such process, or a zombie its new
// parent has not reaped yet.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// Children do not outlive a bench parent killed outright, which can run
// no cleanup of its own. Three things end them: SIGKILL on the parent's
// death, their stdin closing, and the broker (which dies with this parent)
// closing their connection; any one is enough, so this checks that at
// least one works, not which.
func TestDispatchChildrenDieWithParent(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe, "-test.run=^$")
	parent.Env = append(os.Environ(), envTestParent+"="+t.TempDir())
	parent.Stderr = os.Stderr
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = parent.Process.Kill()
		_ = parent.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the parent printed no children: %v", err)
	}
	var pids []int
	if err := json.Unmarshal([]byte(line), &pids); err != nil || len(pids) != 2 { // workers, critical generator
		t.Fatalf("children %q: %v", line, err)
	}
	for _, pid := range pids {
		if gone(pid) {
			t.Fatalf("child %d gone before the parent was killed", pid)
		}
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	deadline := time.Now().Add(time.Minute)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("child %d outlived its killed parent by a minute", pid)
			}
			time.Sleep(10 * time.Millisecond) // polling the process table, with a deadline
		}
	}
}
