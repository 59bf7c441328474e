package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// TestSessionCommands walks one session through every command: made,
// compared-and-set, patched, given rounds, listed, degraded by a moved
// dependency, trimmed and removed.
func TestSessionCommands(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	ses := func(stdin string, args ...string) string {
		t.Helper()
		return mustSemaq(t, url, stdin, append([]string{"session"}, args...)...)
	}
	if out := ses("", "ls"); strings.TrimSpace(out) != "No sessions." {
		t.Fatalf("ls with no sessions: %q", out)
	}

	out := ses(`{"user":"ada","lang":"en"}`, "put", "chat-1", "-", "--ttl", "1h", "--depends", "rag=v1", "--revision", "0")
	if want := "Session chat-1 stored: revision 1, active"; !strings.Contains(out, want) {
		t.Fatalf("put printed %q, want %q", out, want)
	}
	// --revision 0 means "must not exist yet": a second one is refused,
	// naming where the session is.
	r := mustFailSemaq(t, url, "at revision 1", "session", "put", "chat-1", writeFile(t, `{"user":"bob"}`), "--revision", "0")
	if r.stdout != "" {
		t.Errorf("a refused put printed %q", r.stdout)
	}

	out = ses("", "patch", "chat-1", `{"topic":"billing","lang":null}`, "--revision", "1")
	if !strings.Contains(out, "Session chat-1 patched: revision 2") {
		t.Fatalf("patch printed %q", out)
	}
	mustFailSemaq(t, url, "at revision 2", "session", "patch", "chat-1", `{"x":1}`, "--revision", "1")

	out = ses("", "round", "chat-1", "--role", "user", "--content", "Where is my order?",
		"--role", "assistant", "--content", "It shipped.\nTracking: 42", "--tokens", "17")
	if !strings.Contains(out, "Session chat-1 round 1 added: revision 3") {
		t.Fatalf("round printed %q", out)
	}
	ses("", "round", "chat-1", "--role", "user", "--content", "thanks")

	out = ses("", "history", "chat-1")
	for _, want := range []string{"Round 1 ", "17 tokens", "  user: Where is my order?\n", "  assistant: It shipped.\n    Tracking: 42\n", "Round 2 ", "  user: thanks\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("history lacks %q:\n%s", want, out)
		}
	}
	if out := ses("", "history", "chat-1", "--last", "1"); strings.Contains(out, "Round 1 ") || !strings.Contains(out, "Round 2 ") {
		t.Errorf("history --last 1:\n%s", out)
	}
	var rounds semaq.SessionRoundsResponse
	if err := json.Unmarshal([]byte(ses("", "history", "chat-1", "--round", "1", "--json")), &rounds); err != nil {
		t.Fatal(err)
	}
	if rounds.Revision != 4 || len(rounds.Rounds) != 1 || rounds.Rounds[0].Messages[1].Content != "It shipped.\nTracking: 42" {
		t.Errorf("history --round 1 --json = %+v", rounds)
	}

	out = ses("", "get", "chat-1", "--rounds", "1")
	for _, want := range []string{"Session:  chat-1", "Revision: 4", "State:    active", "Rounds:   2 (1 to 2)",
		"ttl 1h0m0s", "Depends:  rag=v1", `"topic": "billing"`, "Round 2 ", "user: thanks"} {
		if !strings.Contains(out, want) {
			t.Errorf("get lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Round 1 ") || strings.Contains(out, `"lang"`) {
		t.Errorf("get --rounds 1 shows round 1 or the patched-away key:\n%s", out)
	}
	var s semaq.Session
	if err := json.Unmarshal([]byte(ses("", "get", "chat-1", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	var data bytes.Buffer
	if err := json.Compact(&data, s.Data); err != nil {
		t.Fatal(err)
	}
	if s.Revision != 4 || data.String() != `{"topic":"billing","user":"ada"}` || s.Settings.Depends["rag"] != "v1" || s.Settings.TTL != time.Hour {
		t.Errorf("get --json = %+v, data %s", s.SessionInfo, data.String())
	}

	// Another tenant's session of the same ID is another session.
	ses("", "put", "chat-1", writeFile(t, `{}`), "--tenant", "acme")
	out = ses("", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "REVISION") {
		t.Fatalf("ls:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) < 5 || f[0] != "chat-1" || f[1] != "-" || f[2] != "active" || f[3] != "4" || f[4] != "2" {
		t.Errorf("ls row %q", lines[1])
	}
	var listed []semaq.SessionInfo
	if err := json.Unmarshal([]byte(ses("", "ls", "--json", "--tenant", "acme")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Tenant != "acme" || listed[0].Revision != 1 {
		t.Errorf("ls --tenant acme --json = %+v", listed)
	}

	// A moved dependency degrades the sessions that declared another
	// version, and only those.
	if out := ses("", "depend", "rag", "v2"); !strings.Contains(out, "Dependency rag moved to v2: 1 session degraded") {
		t.Errorf("depend printed %q", out)
	}
	if out := ses("", "ls", "--state", "degraded"); !strings.Contains(out, "chat-1") || !strings.Contains(out, "degraded") {
		t.Errorf("ls --state degraded:\n%s", out)
	}
	if out := ses("", "ls", "--state", "active"); strings.TrimSpace(out) != "No sessions." {
		t.Errorf("ls --state active after the move:\n%s", out)
	}
	out = ses("", "report", "chat-1", "--confidence", "0.2")
	if !strings.Contains(out, "Session chat-1: degraded") || !strings.Contains(out, "low-confidence streak 1 of 3 (below 0.65)") {
		t.Errorf("report printed %q", out)
	}

	out = ses("", "trim", "chat-1", "--before-round", "2")
	if !strings.Contains(out, "Session chat-1 trimmed, rounds 2 to 2 kept: revision 5, active") {
		t.Errorf("trim printed %q", out)
	}
	if out := ses("", "rm", "chat-1"); strings.TrimSpace(out) != "Session chat-1 removed." {
		t.Errorf("rm printed %q", out)
	}
	mustFailSemaq(t, url, "session chat-1 not found", "session", "get", "chat-1")
	mustFailSemaq(t, url, "session chat-1 not found", "session", "patch", "chat-1", `{}`)
	if out := ses("", "patch", "chat-1", `{"a":1}`, "--create"); !strings.Contains(out, "revision 1") {
		t.Errorf("patch --create of a removed session: %q", out)
	}
}

// writeFile writes s to a file of its own and returns its path.
func writeFile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "data.json")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// lineWriter collects the lines written to it and hands each on.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line) // not a whole line yet
			return len(p), nil
		}
		w.lines <- strings.TrimSuffix(line, "\n")
	}
}

// watching runs `semaq session watch` with args until it exits; its
// stdout lines come on the returned writer, its exit code on done.
func watching(t *testing.T, url string, args ...string) (stdout *lineWriter, stderr *signalWriter, done chan int) {
	t.Helper()
	stdout = &lineWriter{lines: make(chan string, 100)}
	stderr = newSignalWriter("Watching")
	done = make(chan int, 1)
	go func() {
		done <- Main(append([]string{"session", "watch", "--server", url}, args...), strings.NewReader(""), stdout, stderr)
	}()
	select {
	case <-stderr.ready:
	case code := <-done:
		t.Fatalf("watch %v exited %d before watching: %s", args, code, stderr.String())
	}
	return stdout, stderr, done
}

// nextDelta waits for the next line of a watch and reads it as a delta.
func nextDelta(t *testing.T, w *lineWriter) semaq.SessionDelta {
	t.Helper()
	select {
	case line := <-w.lines:
		var d semaq.SessionDelta
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("watch printed %q: %v", line, err)
		}
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delta within 10s")
	}
	panic("unreachable")
}

// A watch from a revision prints the kept deltas from it, then the live
// ones, one JSON line each; one without prints only the live ones; both
// end, saying so, when the session is removed.
func TestSessionWatch(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	mustSemaq(t, url, `{"n":1}`, "session", "put", "w-1", "-")
	mustSemaq(t, url, "", "session", "patch", "w-1", `{"n":2}`)

	all, allErr, allDone := watching(t, url, "w-1", "--from-revision", "2")
	live, liveErr, liveDone := watching(t, url, "w-1")
	if want := "Watching session w-1 (at revision 2) from revision 3"; !strings.Contains(liveErr.String(), want) {
		t.Errorf("watch stderr %q, want %q", liveErr.String(), want)
	}
	if d := nextDelta(t, all); d.Revision != 2 || d.Op != semaq.SessionOpPatch || string(d.Data) != `{"n":2}` {
		t.Errorf("first delta from revision 2: %+v", d)
	}
	mustSemaq(t, url, "", "session", "round", "w-1", "--role", "user", "--content", "hi")
	for name, w := range map[string]*lineWriter{"from 2": all, "live": live} {
		if d := nextDelta(t, w); d.Revision != 3 || d.Op != semaq.SessionOpRound || d.Round == nil || d.Round.Messages[0].Content != "hi" {
			t.Errorf("%s: the round's delta: %+v", name, d)
		}
	}

	mustSemaq(t, url, "", "session", "rm", "w-1")
	for name, c := range map[string]struct {
		done   chan int
		stderr *signalWriter
	}{"from 2": {allDone, allErr}, "live": {liveDone, liveErr}} {
		select {
		case code := <-c.done:
			if code != 0 || !strings.Contains(c.stderr.String(), "Session w-1 was deleted or expired after revision 3; the watch ends") {
				t.Errorf("%s: exit %d after the remove, stderr %q", name, code, c.stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the watch did not end after the remove", name)
		}
	}
	select {
	case line := <-all.lines:
		t.Errorf("a line after the remove: %q", line)
	default:
	}
	mustFailSemaq(t, url, "session w-1 not found", "session", "watch", "w-1")
}

// An interrupted watch ends without an error.
func TestSessionWatchInterrupted(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	mustSemaq(t, url, `{}`, "session", "put", "w-2", "-")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := newSignalWriter("Watching")
	root := newRoot(strings.NewReader(""), &bytes.Buffer{}, stderr)
	root.SetArgs([]string{"session", "watch", "w-2", "--server", url})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	select {
	case <-stderr.ready:
	case err := <-done:
		t.Fatalf("watch ended before watching: %v; stderr: %s", err, stderr.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch after an interrupt: %v", err)
	}
}

// Bad input is refused before anything dials, naming the problem.
func TestSessionErrors(t *testing.T) {
	t.Parallel()
	notObject := writeFile(t, `[1,2]`)
	badJSON := writeFile(t, `{"a":`)
	big := writeFile(t, `{"a":"`+strings.Repeat("x", semaq.MaxSessionBytes)+`"}`)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad id", []string{"session", "get", "a.b"}, `session id "a.b" has '.'`},
		{"not an object", []string{"session", "put", "s1", notObject}, "a JSON array; want an object"},
		{"bad json", []string{"session", "put", "s1", badJSON}, "not valid JSON"},
		{"too big", []string{"session", "put", "s1", big}, "larger than a session may be (512.0 KiB)"},
		{"no file", []string{"session", "put", "s1", filepath.Join(t.TempDir(), "none.json")}, "no such file"},
		{"bad depends", []string{"session", "put", "s1", "-", "--depends", "rag"}, `--depends "rag": want NAME=VERSION`},
		{"ttl too short", []string{"session", "put", "s1", "-", "--ttl", "1ms"}, "ttl 1ms is outside 1s"},
		{"confidence over 1", []string{"session", "put", "s1", "-", "--low-confidence", "2"}, "low_confidence 2 is outside (0, 1]"},
		{"patch not an object", []string{"session", "patch", "s1", `"x"`}, "the patch: a JSON string; want an object"},
		{"round without messages", []string{"session", "round", "s1"}, "at least one message"},
		{"round roles and contents", []string{"session", "round", "s1", "--role", "user", "--role", "assistant", "--content", "hi"}, "2 --role and 1 --content"},
		{"trim 0", []string{"session", "trim", "s1", "--before-round", "0"}, "--before-round 0"},
		{"trim without round", []string{"session", "trim", "s1"}, "before-round"},
		{"report over 1", []string{"session", "report", "s1", "--confidence", "1.5"}, "--confidence 1.5: want 0 to 1"},
		{"ls bad state", []string{"session", "ls", "--state", "expired"}, `--state "expired": want active, stale or degraded`},
		{"ls limit 0", []string{"session", "ls", "--limit", "0"}, "--limit 0: want 1 to 1000"},
		{"depend bad name", []string{"session", "depend", "", "v1"}, "dependency name"},
		{"watch from 0", []string{"session", "watch", "s1", "--from-revision", "0"}, "revisions start at 1"},
		{"history both", []string{"session", "history", "s1", "--last", "1", "--round", "1"}, "not both"},
		{"get rounds -2", []string{"session", "get", "s1", "--rounds", "-2"}, "--rounds -2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustFailSemaq(t, unreachableURL, tc.want, tc.args...)
		})
	}
}
