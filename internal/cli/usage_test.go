package cli

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/broker"
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
