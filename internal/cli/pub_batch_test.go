package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pub --batch publishes a file in batches of --batch-size, prints a line
// per batch naming the first refused message by its line in the file, and
// fails when any was refused.
func TestPubBatch(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	file := filepath.Join(t.TempDir(), "events.ndjson")
	lines := strings.Join([]string{
		`{"subject":"ai.c.1","data":{"n": 1},"headers":{"AI-Model":"m1"}}`,
		``,
		`{"subject":"ai.c.2","data_base64":"aGk="}`,
		`{"subject":"nowhere.x","data":1}`,
		`{"subject":"ai.c.3"}`,
	}, "\n")
	if err := os.WriteFile(file, []byte(lines+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runSemaq(t, url, "", "pub", "--batch", file, "--batch-size", "2")
	if r.code == 0 || !strings.Contains(r.stderr, "semaq: 1 of 4 messages refused") {
		t.Fatalf("exit %d, stderr %q: want a failure counting the refused message", r.code, r.stderr)
	}
	want := "batch 1 (lines 1-3): stored 2\nbatch 2 (lines 4-5): stored 1, refused 1; first: line 4: no stream captures subject nowhere.x"
	if !strings.HasPrefix(r.stdout, want) {
		t.Fatalf("stdout:\n%s\nwant it to start:\n%s", r.stdout, want)
	}
	msgs := parseMsgs(t, mustSemaq(t, url, "", "sub", "ai.c.>", "--count", "3", "--json"))
	if len(msgs) != 3 || msgs[0].Data == nil || *msgs[0].Data != `{"n":1}` || msgs[0].Headers["AI-Model"] != "m1" ||
		msgs[1].Data == nil || *msgs[1].Data != "hi" || msgs[2].Subject != "ai.c.3" {
		t.Fatalf("stored %+v", msgs)
	}

	// All stored: exit 0. From stdin, atomic.
	out := mustSemaq(t, url, `{"subject":"ai.c.4"}`+"\n"+`{"subject":"ai.c.5"}`+"\n", "pub", "--batch", "-", "--atomic")
	if out != "batch 1 (lines 1-2): stored 2\n" {
		t.Fatalf("stdout %q", out)
	}
	// An atomic batch with one refused message stores nothing of it.
	r = runSemaq(t, url, `{"subject":"ai.c.6"}`+"\n"+`{"subject":"ai.*"}`+"\n", "pub", "--batch", "-", "--atomic")
	if r.code == 0 || !strings.Contains(r.stdout, "batch 1 (lines 1-2): refused, nothing stored: line 2: ") ||
		!strings.Contains(r.stderr, "semaq: 2 of 2 messages refused") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if n := streamInfo(t, url, "AI").State.Messages; n != 5 {
		t.Fatalf("stream AI has %d messages, want 5", n)
	}
}

// A line that does not parse stops the run before its batch is sent, and
// the error names the line and what was sent before it.
func TestPubBatchBadLine(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	in := `{"subject":"ai.d.1"}` + "\n" + `{"subject":"ai.d.2"}` + "\n" + `{"subject":"ai.d.3","data":}` + "\n"
	r := runSemaq(t, url, in, "pub", "--batch", "-", "--batch-size", "1")
	if r.code == 0 || !strings.Contains(r.stderr, "semaq: stdin line 3: \"data\": not valid JSON") ||
		!strings.Contains(r.stderr, "the batches before it were sent: 2 stored, 0 refused") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if n := streamInfo(t, url, "AI").State.Messages; n != 2 {
		t.Fatalf("stream AI has %d messages, want the 2 before the bad line", n)
	}
	r = runSemaq(t, url, in, "pub", "--batch", "-", "--batch-size", "10")
	if r.code == 0 || !strings.Contains(r.stderr, "stdin line 3: ") || !strings.Contains(r.stderr, "nothing was sent") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestPubBatchFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pub", "--batch", "-", "--batch-size", "0"}, "--batch-size: 0 is not between 1 and 1000"},
		{[]string{"pub", "--batch", "-", "--batch-size", "1001"}, "--batch-size: 1001 is not between 1 and 1000"},
		{[]string{"pub", "--batch", "-", "--model", "m"}, "--model: not with --batch"},
		{[]string{"pub", "--batch", "-", "ai.x"}, "--batch takes the subjects from the file"},
		{[]string{"pub", "--batch", ""}, "--batch: want FILE"},
		{[]string{"pub", "ai.x", "--atomic"}, "--atomic and --batch-size go with --batch FILE"},
		{[]string{"pub"}, "accepts between 1 and 2 arg(s)"},
		{[]string{"pub", "--batch", filepath.Join(t.TempDir(), "missing.ndjson")}, "missing.ndjson"},
	} {
		mustFailSemaq(t, unreachableURL, tc.want, tc.args...)
	}
}
