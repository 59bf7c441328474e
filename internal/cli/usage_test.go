package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// Every command that needs arguments answers a bare call with the error,
// its usage line and an example, not the bare cobra message.
func TestArgErrorsShowUsage(t *testing.T) {
	t.Parallel()
	root := newRoot(strings.NewReader(""), io.Discard, io.Discard)
	var cmds []*cobra.Command
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Runnable() && sub.Args != nil && sub.Args(sub, nil) != nil {
				cmds = append(cmds, sub)
			}
			walk(sub)
		}
	}
	walk(root)
	if len(cmds) < 10 {
		t.Fatalf("found %d commands that need arguments, expected more", len(cmds))
	}
	for _, c := range cmds {
		path := strings.Fields(c.CommandPath())[1:]
		t.Run(strings.Join(path, "_"), func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			r := result{code: Main(path, strings.NewReader(""), &stdout, &stderr)}
			r.stderr = stderr.String()
			if r.code == 0 {
				t.Fatalf("exit 0 without arguments")
			}
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			if !strings.HasPrefix(lines[0], "semaq: ") {
				t.Errorf("first line %q is not the error", lines[0])
			}
			if !strings.Contains(r.stderr, "Usage: "+c.UseLine()) {
				t.Errorf("stderr lacks the usage line %q:\n%s", c.UseLine(), r.stderr)
			}
			if !strings.Contains(r.stderr, "Example: "+c.CommandPath()+" ") {
				t.Errorf("stderr lacks an example of %s:\n%s", c.CommandPath(), r.stderr)
			}
			if !strings.Contains(r.stderr, c.CommandPath()+" --help") {
				t.Errorf("stderr does not point at --help:\n%s", r.stderr)
			}
		})
	}
}

// A command's own validator keeps its exit code; flag errors and stray
// words stay one line.
func TestUsageErrorExitCodes(t *testing.T) {
	t.Parallel()
	r := runSemaq(t, unreachableURL, "", "schema", "check", "orders")
	if r.code != 2 || !strings.Contains(r.stderr, "accepts 2 arg(s)") || !strings.Contains(r.stderr, "Usage: semaq schema check") {
		t.Errorf("schema check with one argument: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, args := range [][]string{{"sub", "ai.>", "--bogus"}, {"stream", "ls", "extra"}} {
		r := runSemaq(t, unreachableURL, "", args...)
		if r.code != 1 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "semaq: ") {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 and one line", args, r.code, r.stderr)
		}
	}
}

// --server at an HTTP port is named as such instead of an i/o timeout.
func TestServerIsHTTPPort(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	addr := strings.TrimPrefix(web.URL, "http://")
	r := runSemaq(t, "nats://"+addr, "", "stream", "ls")
	want := "--server " + addr + " looks like an HTTP port (SemaQ's HTTP door?); the NATS port is 4222 by default"
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Errorf("stream ls at an HTTP port: exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb strings.Builder
		if code := Main(args, strings.NewReader(""), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
		s := out.String()
		for _, want := range []string{"semaq " + broker.Version, runtime.Version(), "nats-server " + natsserver.VERSION} {
			if !strings.Contains(s, want) {
				t.Errorf("%v = %q, lacks %q", args, s, want)
			}
		}
		if strings.Count(s, "\n") != 1 {
			t.Errorf("%v = %q, want one line", args, s)
		}
	}
}

// A connection that fails says what to do: start the broker, give a key,
// fix the key. Tests with auth set no $SEMAQ_KEY: Main reads it.
func TestConnectRefusalsSayWhatToDo(t *testing.T) {
	if os.Getenv("SEMAQ_KEY") != "" || os.Getenv("SEMAQ_NKEY_SEED") != "" {
		t.Skip("$SEMAQ_KEY or $SEMAQ_NKEY_SEED is set: the missing-key case cannot be shown")
	}
	t.Parallel()
	mustFailSemaq(t, unreachableURL, "is `semaq serve` running at "+unreachableURL+" (--server)?", "stream", "ls")
	mustFailSemaq(t, unreachableURL, "--key: not a SemaQ key (sq_<name>_<id>_<secret>, as semaq user add prints it)", "stream", "ls", "--key", "nope")

	s := brokertest.Start(t, brokertest.WithAuth)
	url := s.ClientURL()
	mustFailSemaq(t, url, "the broker requires a key: pass --key or set SEMAQ_KEY (semaq user add prints one)", "stream", "ls")
	// The admin's key with another secret: well-formed, and unknown.
	key := brokertest.AdminKey(t, s)
	i, c := len(key)-5, byte('A')
	if key[i] == 'A' {
		c = 'B'
	}
	wrong := key[:i] + string(c) + key[i+1:]
	mustFailSemaq(t, url, "the broker refused the credential", "stream", "ls", "--key", wrong)
}

// serve names every busy port with its flag, all at once.
func TestServeNamesBusyPorts(t *testing.T) {
	t.Parallel()
	a, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var stdout, stderr strings.Builder
	code := Main([]string{"serve", "--data", t.TempDir(), "--listen", a.Addr().String(), "--http", b.Addr().String()}, strings.NewReader(""), &stdout, &stderr)
	r := result{code, stdout.String(), stderr.String()}
	want := "--listen " + a.Addr().String() + " and --http " + b.Addr().String() + ": in use"
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Fatalf("serve on busy ports: exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
}

// notifyWriter records what is written and closes seen once want shows.
type notifyWriter struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if strings.Contains(w.b.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Ctrl-C ends every command the same way: "interrupted", exit 130; the
// services (serve, worker) drain and exit 0.
func TestInterruptExits130(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &notifyWriter{want: "Subscribed to", seen: make(chan struct{})}
	done := make(chan int, 1)
	go func() {
		var stdout strings.Builder
		done <- run(ctx, []string{"sub", "ai.chat", "--deliver", "new", "--server", url}, strings.NewReader(""), &stdout, stderr)
	}()
	select {
	case <-stderr.seen:
	case code := <-done:
		t.Fatalf("sub ended with %d before it subscribed: %s", code, stderr.String())
	}
	cancel()
	if code := <-done; code != exitInterrupted || !strings.HasSuffix(stderr.String(), "semaq: interrupted\n") {
		t.Fatalf("sub interrupted: exit %d, stderr %q", code, stderr.String())
	}
	// Interrupted before it connected: the same.
	var out, errb strings.Builder
	if code := run(ctx, []string{"stream", "ls", "--server", url}, strings.NewReader(""), &out, &errb); code != exitInterrupted {
		t.Fatalf("stream ls interrupted: exit %d, stderr %q", code, errb.String())
	}
}

// A mistyped flag gets the nearest one suggested; a payload where the
// subject goes is named as such.
func TestTyposAndSwappedArguments(t *testing.T) {
	t.Parallel()
	mustFailSemaq(t, unreachableURL, "unknown flag: --modle (did you mean --model?)", "worker", "--modle", "llama3")
	mustFailSemaq(t, unreachableURL, `SUBJECT "{\"q\":1}" looks like a payload: the subject comes first`, "pub", `{"q":1}`, "ai.x")
}

// A command typed right after `semaq serve &` waits for the broker to
// listen and its API to come up, instead of failing.
func TestCommandWaitsForAStartingBroker(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	done := make(chan result, 1)
	go func() {
		var stdout, stderr strings.Builder
		code := run(context.Background(), []string{"stream", "ls", "--server", "nats://" + addr}, strings.NewReader(""), &stdout, &stderr)
		done <- result{code, stdout.String(), stderr.String()}
	}()
	brokertest.Start(t, func(c *broker.Config) { c.Listen = addr })
	if r := <-done; r.code != 0 {
		t.Fatalf("stream ls while the broker started: exit %d, stderr %q", r.code, r.stderr)
	}
}
