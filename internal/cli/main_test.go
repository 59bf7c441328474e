package cli

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/plugin/plugintest"
)

// childEnv makes the test binary run Main with the JSON-encoded arguments
// instead of the tests: a real `semaq` process the tests can kill.
const childEnv = "SEMAQ_TEST_MAIN"

func TestMain(m *testing.M) {
	if args := os.Getenv(childEnv); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			panic(err)
		}
		os.Exit(Main(a, os.Stdin, os.Stdout, os.Stderr))
	}
	code := m.Run()
	plugintest.Cleanup() // the plugins plugin tests built
	os.Exit(code)
}

// child is a `semaq serve` process started by a test.
type child struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, valid after done
	mu   sync.Mutex
	log  strings.Builder
}

var readyLine = regexp.MustCompile(`msg="semaq ready" nats=(\S+)`)

// startChild runs `semaq serve args...` in a new process and waits until it
// reports ready. The process is killed at the end of the test if still
// running.
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	a, _ := json.Marshal(append([]string{"serve"}, args...))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(a))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.log.WriteString(line + "\n")
			c.mu.Unlock()
			if m := readyLine.FindStringSubmatch(line); m != nil {
				select {
				case ready <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = cmd.Process.Kill()
			<-c.done
		}
	})
	select {
	case c.url = <-ready:
		return c
	case <-c.done:
		t.Fatalf("semaq serve exited before ready: %v\n%s", c.err, c.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("semaq serve not ready after 60s\n%s", c.output())
	}
	return nil
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// wait waits for the process to exit and returns its exit code.
func (c *child) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("semaq serve did not exit\n%s", c.output())
	}
	return c.cmd.ProcessState.ExitCode()
}
