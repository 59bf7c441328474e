//go:build unix

package proctest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// enableEnv turns the tests of this package on: each starts and kills
// real processes for a minute or more, too long for every `go test`.
const enableEnv = "SEMAQ_PROCESS_TESTS"

// binEnv names a semaq binary to run instead of building one.
const binEnv = "SEMAQ_BIN"

// needProcesses skips the test unless SEMAQ_PROCESS_TESTS=1, saying how to
// run it.
func needProcesses(t *testing.T) {
	t.Helper()
	if os.Getenv(enableEnv) != "1" {
		t.Skipf("starts and kills semaq processes for a minute or more: run with %s=1 (docs/cluster.md, Failure tests)", enableEnv)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	if os.Getenv(eoProcEnv) != "" {
		// This binary started as an exactly-once processor
		// (exactlyonce_kill_test.go).
		os.Exit(eoProcessorMain())
	}
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// semaqBinary is $SEMAQ_BIN, or cmd/semaq built once for the package's
// tests.
func semaqBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv(binEnv); p != "" {
			binPath = p
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if buildDir, buildErr = os.MkdirTemp("", "semaq-proctest-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "semaq")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/semaq")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/semaq: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// readyLine is what `semaq serve` logs once it serves (internal/broker,
// server.go).
var readyLine = regexp.MustCompile(`msg="semaq ready" nats=(\S+)`)

// proc is one `semaq serve` process, started again with the same arguments
// after a kill or a stop. Its output goes to a log file that all its runs
// append to. Its methods are called from the test's goroutine only.
type proc struct {
	name    string
	bin     string
	args    []string
	env     []string // added to the test's environment
	logPath string

	cmd   *exec.Cmd
	done  chan struct{} // closed when the current run has exited
	ready chan struct{} // closed when the current run logged readyLine
}

// start runs the process and returns at once; waitStarted waits for its
// readiness.
func (p *proc) start(t *testing.T) {
	t.Helper()
	if p.running() {
		t.Fatalf("%s: started while running", p.name)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "==== %s: start %s %s\n", time.Now().Format(time.RFC3339Nano), p.name, strings.Join(p.args, " "))
	ready := make(chan struct{})
	w := &readyWriter{f: f, ready: ready}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = w, w
	if p.env != nil {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("%s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(f, "==== %s: exited: %v\n", time.Now().Format(time.RFC3339Nano), err)
		f.Close()
		close(done)
	}()
	p.cmd, p.done, p.ready = cmd, done, ready
}

func (p *proc) running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitStarted waits until the process logged that it serves; it fails the
// test if the process exits first or timeout passes.
func (p *proc) waitStarted(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.done:
		t.Fatalf("%s exited before it was ready:\n%s", p.name, p.tail(40))
	case <-time.After(timeout):
		t.Fatalf("%s not ready after %s:\n%s", p.name, timeout, p.tail(40))
	}
}

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop sends SIGTERM and waits up to timeout for the process to exit; it
// fails the test if it does not.
func (p *proc) stop(t *testing.T, timeout time.Duration) {
	t.Helper()
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit %s after SIGTERM:\n%s", p.name, timeout, p.tail(40))
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM:\n%s", p.name, code, p.tail(40))
	}
}

// tail is the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// grep is the lines of the process's log matching expr (at most the
// last 100), and every start and exit.
func (p *proc) grep(expr string) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	re := regexp.MustCompile(expr)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "==== ") || re.MatchString(l) {
			out = append(out, l)
		}
	}
	if len(out) > 100 {
		out = out[len(out)-100:]
	}
	return strings.Join(out, "\n")
}

// readyWriter writes a process's output to its log and closes ready at the
// first readyLine.
type readyWriter struct {
	f     *os.File
	mu    sync.Mutex
	line  []byte
	ready chan struct{}
	seen  bool
}

func (w *readyWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.seen {
		w.line = append(w.line, b...)
		for {
			i := bytes.IndexByte(w.line, '\n')
			if i < 0 {
				break
			}
			if readyLine.Match(w.line[:i]) {
				w.seen = true
				close(w.ready)
				w.line = nil
				break
			}
			w.line = w.line[i+1:]
		}
	}
	return w.f.Write(b)
}
