package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// unreachableURL is a server URL nothing listens on: commands that must fail
// before dialling are given it, so a dial would show up as the wrong error.
const unreachableURL = "nats://127.0.0.1:1"

// result is what one run of the command line produced (bench_test.go uses it too).
type result struct {
	code           int
	stdout, stderr string
}

// runSemaq runs the semaq command line against url with stdin as its input.
func runSemaq(t *testing.T, url, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append(args, "--server", url)
	code := Main(args, strings.NewReader(stdin), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// mustSemaq runs a command that must succeed.
func mustSemaq(t *testing.T, url, stdin string, args ...string) string {
	t.Helper()
	r := runSemaq(t, url, stdin, args...)
	if r.code != 0 {
		t.Fatalf("semaq %s: exit %d, stderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// mustFailSemaq runs a command that must fail with a one-line error on stderr
// containing want.
func mustFailSemaq(t *testing.T, url, want string, args ...string) result {
	t.Helper()
	r := runSemaq(t, url, "", args...)
	if r.code == 0 {
		t.Fatalf("semaq %s: exit 0, want failure; stdout: %s", strings.Join(args, " "), r.stdout)
	}
	if !strings.Contains(r.stderr, want) {
		t.Fatalf("semaq %s: stderr %q does not contain %q", strings.Join(args, " "), r.stderr, want)
	}
	if last := lastLine(r.stderr); !strings.HasPrefix(last, "semaq: ") {
		t.Fatalf("semaq %s: last stderr line %q does not start with \"semaq: \"", strings.Join(args, " "), last)
	}
	return r
}

// lastLine is the last line of stderr before the usage that follows an
// argument error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for len(lines) > 1 {
		l := lines[len(lines)-1]
		if !strings.HasPrefix(l, "Usage: ") && !strings.HasPrefix(l, "Example: ") && !strings.HasPrefix(l, "Run 'semaq ") {
			break
		}
		lines = lines[:len(lines)-1]
	}
	return lines[len(lines)-1]
}

// startWithStream starts a broker with stream AI capturing ai.>.
func startWithStream(t *testing.T) (*broker.Server, string) {
	t.Helper()
	srv := brokertest.Start(t)
	url := srv.ClientURL()
	mustSemaq(t, url, "", "stream", "add", "AI", "--subjects", "ai.>")
	return srv, url
}

// subMsg is the JSON form of a message printed by sub --json.
type subMsg struct {
	Subject string            `json:"subject"`
	Stream  string            `json:"stream"`
	Seq     uint64            `json:"seq"`
	Time    time.Time         `json:"time"`
	Headers map[string]string `json:"headers"`
	Data    *string           `json:"data"`
	DataB64 []byte            `json:"data_b64"`
}

func parseMsgs(t *testing.T, out string) []subMsg {
	t.Helper()
	var msgs []subMsg
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var m subMsg
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("sub --json line %q: %v", line, err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

func seqs(msgs []subMsg) []uint64 {
	s := make([]uint64, len(msgs))
	for i, m := range msgs {
		s[i] = m.Seq
	}
	return s
}

func streamInfo(t *testing.T, url, name string) semaq.StreamInfo {
	t.Helper()
	var info semaq.StreamInfo
	out := mustSemaq(t, url, "", "stream", "info", name, "--json")
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("stream info --json: %v\n%s", err, out)
	}
	return info
}

func TestStreamRoundTrip(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	url := srv.ClientURL()

	out := mustSemaq(t, url, "", "stream", "add", "AI", "--subjects", "ai.>,llm.*",
		"--retention", "limits", "--storage", "memory", "--max-age", "1h", "--max-bytes", "1048576",
		"--description", "inference requests", "--json")
	var added semaq.StreamInfo
	if err := json.Unmarshal([]byte(out), &added); err != nil {
		t.Fatalf("stream add --json: %v\n%s", err, out)
	}
	c := added.Config
	if c.Name != "AI" || strings.Join(c.Subjects, ",") != "ai.>,llm.*" || c.Storage != "memory" ||
		c.MaxAge != time.Hour || c.MaxBytes != 1<<20 || c.Description != "inference requests" {
		t.Errorf("stream add --json config = %+v", c)
	}
	if !strings.Contains(out, `"ai.>"`) {
		t.Errorf("stream add --json escapes the subject wildcard: %s", out)
	}

	mustFailSemaq(t, url, "already exists", "stream", "add", "AI", "--subjects", "other.>")
	mustFailSemaq(t, url, "overlap", "stream", "add", "AI2", "--subjects", "ai.x")

	out = mustSemaq(t, url, "", "stream", "add", "JOBS", "--subjects", "jobs.*", "--retention", "workqueue")
	if !strings.Contains(out, "JOBS") || !strings.Contains(out, "workqueue") {
		t.Errorf("stream add output %q names neither the stream nor its retention", out)
	}
	mustSemaq(t, url, "", "pub", "ai.x", "one")

	out = mustSemaq(t, url, "", "stream", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("stream ls: want a header and 2 rows, got:\n%s", out)
	}
	for _, col := range []string{"NAME", "SUBJECTS", "MESSAGES", "BYTES", "STORAGE", "RETENTION"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("stream ls header %q lacks %s", lines[0], col)
		}
	}
	if f := strings.Fields(lines[1]); len(f) < 3 || f[0] != "AI" || f[1] != "ai.>,llm.*" || f[2] != "1" || !strings.Contains(lines[1], "memory") {
		t.Errorf("stream ls row for AI = %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 3 || f[0] != "JOBS" || f[2] != "0" || !strings.Contains(lines[2], "workqueue") {
		t.Errorf("stream ls row for JOBS = %q", lines[2])
	}

	var list []semaq.StreamInfo
	out = mustSemaq(t, url, "", "stream", "ls", "--json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("stream ls --json: %v\n%s", err, out)
	}
	if len(list) != 2 || list[0].Config.Name != "AI" || list[0].State.Messages != 1 || list[1].Config.Name != "JOBS" {
		t.Errorf("stream ls --json = %+v", list)
	}

	info := streamInfo(t, url, "AI")
	if info.Sync == "" || info.Created.IsZero() || info.State.Messages != 1 || info.State.FirstSeq != 1 || info.State.LastSeq != 1 {
		t.Errorf("stream info --json = %+v", info)
	}
	out = mustSemaq(t, url, "", "stream", "info", "AI")
	for _, want := range []string{"Stream AI", "inference requests", "ai.>, llm.*", "memory", "Durability:", info.Sync, "Created:", "Messages:", "First seq:", "Last seq:"} {
		if !strings.Contains(out, want) {
			t.Errorf("stream info lacks %q:\n%s", want, out)
		}
	}

	out = mustSemaq(t, url, "", "stream", "rm", "JOBS")
	if !strings.Contains(out, "JOBS") {
		t.Errorf("stream rm output %q does not name the stream", out)
	}
	mustFailSemaq(t, url, "not found", "stream", "info", "JOBS")
	mustFailSemaq(t, url, "not found", "stream", "rm", "JOBS")
	mustSemaq(t, url, "", "stream", "rm", "AI")
	if out := mustSemaq(t, url, "", "stream", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("stream ls --json with no streams = %q, want []", out)
	}
	if out := mustSemaq(t, url, "", "stream", "ls"); !strings.Contains(out, "No streams") {
		t.Errorf("stream ls with no streams = %q", out)
	}
}

func TestStreamAddFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no subjects", []string{"stream", "add", "AI"}, "--subjects"},
		{"bad retention", []string{"stream", "add", "AI", "--subjects", "ai.>", "--retention", "forever"}, "--retention"},
		{"bad storage", []string{"stream", "add", "AI", "--subjects", "ai.>", "--storage", "tape"}, "--storage"},
		{"bad max-age", []string{"stream", "add", "AI", "--subjects", "ai.>", "--max-age", "soon"}, "--max-age"},
		{"no name", []string{"stream", "add", "--subjects", "ai.>"}, "arg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mustFailSemaq(t, unreachableURL, tc.want, tc.args...)
		})
	}

	var stdout, stderr bytes.Buffer
	if code := Main([]string{"stream", "bogus"}, strings.NewReader(""), &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), `unknown command "bogus"`) {
		t.Errorf("semaq stream bogus: exit %d, stderr %q; want an unknown command error", code, stderr.String())
	}
}

func TestPubEnvelopeFlags(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)

	before := time.Now()
	mustSemaq(t, url, "", "pub", "ai.inference.llm", "hello",
		"--model", "llama3-70b", "--model-version", "v1", "--adapter", "sql-lora",
		"--priority", "high", "--tenant", "acme", "--intent", "summarize", "--timeout", "8s",
		"--session", "s-42", "--prompt-tokens", "1200", "--msg-id", "m-1", "--ttl", "1h",
		"--header", "X-Custom=yes")
	mustSemaq(t, url, "", "pub", "ai.inference.llm", "again",
		"--header", "X-Model-Version=v2", "--header", "X-Lora-Adapter-ID=other", "--priority", "7")

	out := mustSemaq(t, url, "", "sub", "ai.>", "--json", "--count", "2", "--timeout", "10s")
	msgs := parseMsgs(t, out)
	if len(msgs) != 2 {
		t.Fatalf("sub --count 2 printed %d messages:\n%s", len(msgs), out)
	}

	m := msgs[0]
	if m.Subject != "ai.inference.llm" || m.Stream != "AI" || m.Seq != 1 || m.Data == nil || *m.Data != "hello" {
		t.Errorf("message 1 = %+v", m)
	}
	for name, want := range map[string]string{
		semaq.HdrModel:        "llama3-70b",
		semaq.HdrModelVersion: "v1",
		semaq.HdrAdapter:      "sql-lora",
		semaq.HdrPriority:     "2",
		semaq.HdrTenant:       "acme",
		semaq.HdrIntent:       "summarize",
		semaq.HdrSession:      "s-42",
		semaq.HdrPromptTokens: "1200",
		semaq.HdrMsgID:        "m-1",
		"X-Custom":            "yes",
	} {
		if got := m.Headers[name]; got != want {
			t.Errorf("message 1 header %s = %q, want %q", name, got, want)
		}
	}
	if m.Headers[semaq.HdrTimeout] == "" || m.Headers[semaq.HdrTTL] == "" {
		t.Errorf("message 1 lacks %s or %s: %v", semaq.HdrTimeout, semaq.HdrTTL, m.Headers)
	}
	deadline, err := time.Parse(time.RFC3339Nano, m.Headers[semaq.HdrDeadline])
	if err != nil {
		t.Errorf("message 1 %s: %v (headers %v)", semaq.HdrDeadline, err, m.Headers)
	} else if lo, hi := before.Add(8*time.Second), time.Now().Add(8*time.Second); deadline.Before(lo.Add(-time.Second)) || deadline.After(hi) {
		t.Errorf("message 1 %s = %s, want about 8s after publishing (%s..%s)", semaq.HdrDeadline, deadline, lo, hi)
	}

	m = msgs[1]
	if m.Seq != 2 || m.Data == nil || *m.Data != "again" {
		t.Errorf("message 2 = %+v", m)
	}
	for name, want := range map[string]string{
		semaq.HdrModelVersion: "v2",
		semaq.HdrAdapter:      "other",
		semaq.HdrPriority:     "7",
	} {
		if got := m.Headers[name]; got != want {
			t.Errorf("message 2 header %s = %q, want %q", name, got, want)
		}
	}
	for _, alias := range []string{semaq.AliasModelVersion, semaq.AliasAdapter} {
		if _, ok := m.Headers[alias]; ok {
			t.Errorf("message 2 keeps alias %s: %v", alias, m.Headers)
		}
	}
	if _, ok := m.Headers[semaq.HdrDeadline]; ok {
		t.Errorf("message 2 has %s without --timeout: %v", semaq.HdrDeadline, m.Headers)
	}
}

func TestPubRejected(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad priority", []string{"pub", "ai.x", "hi", "--priority", "urgent"}, "--priority"},
		{"priority out of range", []string{"pub", "ai.x", "hi", "--priority", "10"}, "--priority"},
		{"header without =", []string{"pub", "ai.x", "hi", "--header", "AI-Model"}, "--header"},
		{"header without name", []string{"pub", "ai.x", "hi", "--header", "=v"}, "--header"},
		{"negative timeout", []string{"pub", "ai.x", "hi", "--timeout", "-1s"}, "--timeout"},
		{"short ttl", []string{"pub", "ai.x", "hi", "--ttl", "500ms"}, "--ttl"},
		{"empty model", []string{"pub", "ai.x", "hi", "--model", ""}, "--model"},
		{"bad prompt tokens header", []string{"pub", "ai.x", "hi", "--header", "AI-Prompt-Tokens=abc"}, "AI-Prompt-Tokens"},
		{"bad priority header", []string{"pub", "ai.x", "hi", "--header", "AI-Priority=soon"}, "AI-Priority"},
		{"model given twice", []string{"pub", "ai.x", "hi", "--model", "a", "--header", "ai-model=b"}, "twice"},
		{"uncaptured subject", []string{"pub", "nowhere.x", "hi"}, "no stream captures"},
		{"no subject", []string{"pub"}, "arg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustFailSemaq(t, url, tc.want, tc.args...)
		})
	}
	if n := streamInfo(t, url, "AI").State.Messages; n != 0 {
		t.Errorf("rejected publishes stored %d messages", n)
	}
}

func TestPubDedup(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)

	ack := func(out string) (semaq.PubAck, map[string]any) {
		t.Helper()
		var a semaq.PubAck
		var raw map[string]any
		if err := json.Unmarshal([]byte(out), &a); err != nil {
			t.Fatalf("pub --json: %v\n%s", err, out)
		}
		_ = json.Unmarshal([]byte(out), &raw)
		return a, raw
	}
	a, raw := ack(mustSemaq(t, url, "", "pub", "ai.x", "once", "--msg-id", "job-1", "--json"))
	if a.Stream != "AI" || a.Sequence != 1 || a.Duplicate || raw["duplicate"] != false || len(raw) != 4 || semaq.CheckCancelToken(a.CancelToken) != nil {
		t.Errorf("first pub --json = %v, want stream AI, seq 1, duplicate false and a cancel token", raw)
	}
	a, raw = ack(mustSemaq(t, url, "", "pub", "ai.x", "once", "--msg-id", "job-1", "--json"))
	if a.Sequence != 1 || !a.Duplicate || len(raw) != 4 {
		t.Errorf("second pub --json = %v, want seq 1, duplicate true", raw)
	}
	if out := mustSemaq(t, url, "", "pub", "ai.x", "once", "--msg-id", "job-1"); out != "Published to stream AI seq 1 (duplicate)\n" {
		t.Errorf("third pub = %q", out)
	}
	if out := mustSemaq(t, url, "", "pub", "ai.x", "twice", "--msg-id", "job-2"); out != "Published to stream AI seq 2\n" {
		t.Errorf("pub with a new id = %q", out)
	}
	if n := streamInfo(t, url, "AI").State.Messages; n != 2 {
		t.Errorf("stream holds %d messages, want 2", n)
	}
}

func TestPubPayloads(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)

	mustSemaq(t, url, "line one\nline two\n", "pub", "ai.x", "-")
	mustSemaq(t, url, "", "pub", "ai.x")
	mustSemaq(t, url, "\xff\xfe\x00binary", "pub", "ai.x", "-")

	msgs := parseMsgs(t, mustSemaq(t, url, "", "sub", "ai.x", "--json", "--count", "3", "--timeout", "10s"))
	if len(msgs) != 3 {
		t.Fatalf("got %d messages, want 3", len(msgs))
	}
	if m := msgs[0]; m.Data == nil || *m.Data != "line one\nline two\n" || m.DataB64 != nil {
		t.Errorf("stdin payload came back as %+v", m)
	}
	if m := msgs[1]; m.Data == nil || *m.Data != "" {
		t.Errorf("empty payload came back as %+v", m)
	}
	if m := msgs[2]; m.Data != nil || string(m.DataB64) != "\xff\xfe\x00binary" {
		t.Errorf("binary payload came back as %+v, want data_b64 only", m)
	}
}

func TestSubHumanOutput(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	mustSemaq(t, url, "", "pub", "ai.chat", `{"prompt":"hi"}`, "--model", "m1", "--tenant", "acme")
	mustSemaq(t, url, "\xff\xfe", "pub", "ai.chat", "-")

	out := mustSemaq(t, url, "", "sub", "ai.chat", "--count", "2", "--timeout", "10s")
	for _, want := range []string{"[#1] ai.chat", "  AI-Model: m1\n", "  AI-Tenant: acme\n", `{"prompt":"hi"}` + "\n", "[#2] ai.chat", "//4="} {
		if !strings.Contains(out, want) {
			t.Errorf("sub output lacks %q:\n%s", want, out)
		}
	}
	if i, j := strings.Index(out, "AI-Model:"), strings.Index(out, "AI-Tenant:"); i < 0 || j < i {
		t.Errorf("headers are not sorted:\n%s", out)
	}
}

func TestSubCount(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	for i := 0; i < 5; i++ {
		mustSemaq(t, url, "", "pub", "ai.x", "m")
	}
	msgs := parseMsgs(t, mustSemaq(t, url, "", "sub", "ai.x", "--json", "--count", "3", "--timeout", "10s"))
	if got := seqs(msgs); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("sub --count 3 got seqs %v, want 1-3", got)
	}
}

func TestSubCountTimeout(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	mustSemaq(t, url, "", "pub", "ai.x", "only")

	r := mustFailSemaq(t, url, "1 of 3", "sub", "ai.x", "--json", "--count", "3", "--timeout", "2s")
	if got := seqs(parseMsgs(t, r.stdout)); !slices.Equal(got, []uint64{1}) {
		t.Errorf("sub printed seqs %v before timing out, want [1]", got)
	}
}

func TestSubTimeoutWithoutCount(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	mustSemaq(t, url, "", "pub", "ai.x", "a")
	mustSemaq(t, url, "", "pub", "ai.y", "b")

	msgs := parseMsgs(t, mustSemaq(t, url, "", "sub", "ai.>", "--json", "--timeout", "2s"))
	if got := seqs(msgs); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("sub --timeout got seqs %v, want 1-2", got)
	}
}

func TestSubDurableResume(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	for i := 0; i < 6; i++ {
		mustSemaq(t, url, "", "pub", "ai.jobs", "job")
	}
	// The ack wait is 30s; the 10s timeout fails the test if the second run
	// has to wait for messages the first one pulled but did not take.
	sub := []string{"sub", "ai.jobs", "--durable", "worker", "--json", "--count", "3", "--timeout", "10s"}
	if got := seqs(parseMsgs(t, mustSemaq(t, url, "", sub...))); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("first durable run got seqs %v, want 1-3", got)
	}
	if got := seqs(parseMsgs(t, mustSemaq(t, url, "", sub...))); !slices.Equal(got, []uint64{4, 5, 6}) {
		t.Errorf("second durable run got seqs %v, want 4-6", got)
	}
	if info := streamInfo(t, url, "AI"); info.State.ConsumerCount != 1 {
		t.Errorf("the durable consumer is gone: %d consumers", info.State.ConsumerCount)
	}
}

// signalWriter is a buffer that closes ready once it has seen want.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	want  string
	ready chan struct{}
	once  sync.Once
}

func newSignalWriter(want string) *signalWriter {
	return &signalWriter{want: want, ready: make(chan struct{})}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.ready) })
	}
	return n, err
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitReady waits until w has seen its string or done is closed.
func waitReady(t *testing.T, w *signalWriter, done <-chan int) {
	t.Helper()
	select {
	case <-w.ready:
	case code := <-done:
		t.Fatalf("sub exited %d before subscribing; stderr: %s", code, w.String())
	}
}

func TestSubDeliverNew(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	mustSemaq(t, url, "", "pub", "ai.x", "old")
	mustSemaq(t, url, "", "pub", "ai.x", "old")

	var stdout bytes.Buffer
	stderr := newSignalWriter("Subscribed")
	done := make(chan int, 1)
	go func() {
		args := []string{"sub", "ai.x", "--deliver", "new", "--json", "--count", "1", "--timeout", "10s", "--server", url}
		done <- Main(args, strings.NewReader(""), &stdout, stderr)
	}()
	waitReady(t, stderr, done)
	mustSemaq(t, url, "", "pub", "ai.x", "new")
	if code := <-done; code != 0 {
		t.Fatalf("sub --deliver new: exit %d, stderr: %s", code, stderr.String())
	}
	msgs := parseMsgs(t, stdout.String())
	if len(msgs) != 1 || msgs[0].Seq != 3 || *msgs[0].Data != "new" {
		t.Errorf("sub --deliver new got %+v, want only seq 3", msgs)
	}
}

func TestSubInterrupted(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)

	// Main's context ends on SIGINT; cancelling the command's context is
	// the same thing without signalling the test process.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout bytes.Buffer
	stderr := newSignalWriter("Subscribed")
	root := newRoot(strings.NewReader(""), &stdout, stderr)
	root.SetArgs([]string{"sub", "ai.x", "--count", "5", "--timeout", "30s", "--server", url})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	select {
	case <-stderr.ready:
	case err := <-done:
		t.Fatalf("sub ended before subscribing: %v; stderr: %s", err, stderr.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("sub after cancel: %v, want success", err)
	}
}

func TestSubErrors(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	for _, tc := range []struct {
		name string
		url  string
		args []string
		want string
	}{
		{"bad deliver", unreachableURL, []string{"sub", "ai.x", "--deliver", "last"}, "--deliver"},
		{"zero count", unreachableURL, []string{"sub", "ai.x", "--count", "0"}, "--count"},
		{"bad durable", unreachableURL, []string{"sub", "ai.x", "--durable", "a.b"}, "--durable"},
		{"bad timeout", unreachableURL, []string{"sub", "ai.x", "--timeout", "-1s"}, "--timeout"},
		{"uncaptured subject", url, []string{"sub", "nowhere.x", "--timeout", "10s"}, "no stream captures"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustFailSemaq(t, tc.url, tc.want, tc.args...)
		})
	}

	// A durable follows one subject; reusing its name elsewhere is refused.
	mustSemaq(t, url, "", "pub", "ai.first", "x")
	mustSemaq(t, url, "", "sub", "ai.first", "--durable", "d", "--count", "1", "--timeout", "10s")
	mustFailSemaq(t, url, "ai.first", "sub", "ai.other", "--durable", "d", "--timeout", "10s")
}

// stream add echoes what was set: durability, and the schema when bound.
func TestStreamAddEchoes(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	out := mustSemaq(t, url, "", "stream", "add", "SAFE", "--subjects", "safe.>", "--durability", "fsync")
	if want := "Stream SAFE created: subjects safe.>, retention limits, storage file, durability fsync\n"; out != want {
		t.Errorf("stream add --durability fsync = %q, want %q", out, want)
	}
	mustSemaq(t, url, `{"type":"object"}`, "schema", "register", "req", "-")
	out = mustSemaq(t, url, "", "stream", "add", "CHECKED", "--subjects", "checked.>", "--durability", "interval", "--schema", "req")
	if !strings.Contains(out, "durability interval, schema req") {
		t.Errorf("stream add --schema req = %q, want it to name the schema", out)
	}
}
