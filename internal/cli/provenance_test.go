package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/provenancetest"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// runOffline runs the command line without --server: for commands that
// contact no broker.
func runOffline(stdin string, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := Main(args, strings.NewReader(stdin), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// provenanceChain is a signed chain of 8 links; link k at stream seq
// 99+2k.
func provenanceChain() *provenancetest.Chain {
	c := provenancetest.New("AGENT", "acme", "s-1").Signed("n1", provenancetest.Key(1))
	c.Skip(100)
	for k := 1; k <= 8; k++ {
		c.Add("agent.acme.step", fmt.Sprintf(`{"step":%d}`, k), map[string][]string{"AI-Model": {"llama3"}})
		c.Skip(1)
	}
	c.Seq--
	return c
}

func b64(k ed25519.PrivateKey) string {
	return base64.StdEncoding.EncodeToString(k.Public().(ed25519.PublicKey))
}

func TestProvenanceVerifyCommand(t *testing.T) {
	c := provenanceChain()
	good := writeFile(t, string(c.Export(t, nil, c.Links)))
	links := provenancetest.Copy(c.Links)
	links[6].Data = []byte(`{"step":"edited"}`)
	modified := writeFile(t, string(c.Export(t, nil, links)))
	missing := writeFile(t, string(c.Export(t, nil, append(provenancetest.Copy(c.Links[:4]), c.Links[5:]...))))
	broken := writeFile(t, string(append(c.Export(t, nil, c.Links[:2]), "{\"seq\":3,\n"...)))
	keysLines := writeFile(t, "# n1\n"+b64(provenancetest.Key(1))+"\n")
	keysJSON := writeFile(t, string(mustJSON(t, []semaq.ProvenanceKey{{ID: "x", Node: "n1", PublicKey: provenancetest.Key(1).Public().(ed25519.PublicKey)}})))
	hugeKeys := writeFile(t, strings.Repeat(b64(provenancetest.Key(1))+"\n", 30000))
	head, id := c.Head().Hash, provenance.KeyID(provenancetest.Key(1).Public().(ed25519.PublicKey))
	okLine := "OK: 8 links of session s-1 (tenant acme) in stream AGENT, head " + head + ", signed by key " + id + " (n1)"

	cases := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string // the whole of it
		stderr string // the whole of it, or a part when it ends in "…"
	}{
		{"untouched", "", []string{good}, 0, okLine + ", not pinned (the export's own keys)\n", ""},
		{"from stdin", string(c.Export(t, nil, c.Links)), []string{"-"}, 0, okLine + ", not pinned (the export's own keys)\n", ""},
		{"pinned key", "", []string{good, "--key", b64(provenancetest.Key(1))}, 0, okLine + ", trusted\n", ""},
		{"pinned keys file", "", []string{good, "--key", keysLines}, 0, okLine + ", trusted\n", ""},
		{"pinned keys JSON", "", []string{good, "--key", keysJSON}, 0, okLine + ", trusted\n", ""},
		{"anchored", "", []string{good, "--head", c.Links[4].Headers[provenance.HdrHash][0]}, 0,
			okLine + ", not pinned (the export's own keys), anchored at link 5\n", ""},
		{"modified", "", []string{modified}, 1, "",
			"semaq: link 7 (stream seq 113): modified: its content does not hash to its AI-Hash\n"},
		{"missing", "", []string{missing}, 1, "",
			"semaq: link 5 missing: link 4 (stream seq 107) is followed by link 6 (stream seq 111)\n"},
		{"another key", "", []string{good, "--key", b64(provenancetest.Key(2))}, 1, "",
			"semaq: link 1 (stream seq 101): bad signature: key " + id + " (node n1) is not one of the trusted keys\n"},
		{"another anchor", "", []string{good, "--head", strings.Repeat("ab", 32)}, 1, "",
			"semaq: not anchored: the trusted head " + strings.Repeat("ab", 32) + " is not the hash of any link of this chain: it was rewritten, or is another chain\n"},
		{"not an export", "", []string{broken}, 2, "", "semaq: " + broken + ": line 4: link: the JSON object ends early: a line cut short?\n"},
		{"no such file", "", []string{filepath.Join(t.TempDir(), "nope")}, 2, "", "semaq: open …"},
		{"bad key", "", []string{good, "--key", "c2hvcnQ="}, 2, "",
			`semaq: --key "c2hvcnQ=" is neither a file nor a base64 Ed25519 public key (5 bytes, not 32)` + "\n"},
		{"bad head", "", []string{good, "--head", "abc"}, 2, "", `semaq: --head: hash "abc" is 3 characters, not 64` + "\n"},
		{"no file", "", nil, 2, "", "semaq: accepts 1 arg(s), received 0\n…"},
		{"huge keys file", "", []string{good, "--key", hugeKeys}, 2, "", "semaq: --key " + hugeKeys + " is larger than 1.0 MiB: not a file of keys\n"},
		{"mistyped flag", "", []string{good, "--kye", "x"}, 2, "", "semaq: unknown flag: --kye (did you mean --key?)…"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runOffline(tc.stdin, append([]string{"provenance", "verify"}, tc.args...)...)
			if r.code != tc.code || r.stdout != tc.stdout {
				t.Fatalf("exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q", r.code, r.stdout, r.stderr, tc.code, tc.stdout)
			}
			if want, part := strings.CutSuffix(tc.stderr, "…"); part && !strings.HasPrefix(r.stderr, want) || !part && r.stderr != want {
				t.Fatalf("stderr %q, want %q", r.stderr, tc.stderr)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProvenanceExportCommand exports a session's chain from a real
// broker and verifies it with the nodes' keys as `semaq provenance keys
// --json` prints them.
func TestProvenanceExportCommand(t *testing.T) {
	srv := brokertest.Start(t, func(c *broker.Config) { c.Name = "n1" })
	url := srv.ClientURL()
	mustSemaq(t, url, "", "stream", "add", "AGENT", "--subjects", "agent.>", "--provenance", "signed")
	for k := range 5 {
		mustSemaq(t, url, "", "pub", "agent.acme.step", fmt.Sprintf(`{"step":%d}`, k), "--tenant", "acme", "--session", "s-1", "--model", "llama3")
		mustSemaq(t, url, "", "pub", "agent.acme.step", `{"other":true}`, "--tenant", "acme", "--session", "s-2")
	}
	c := brokertest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	head, err := c.ProvenanceHead(ctx, "AGENT", "acme", "s-1")
	if err != nil || head.Links != 5 {
		t.Fatalf("head %+v, %v: want 5 links", head, err)
	}

	dir := t.TempDir()
	out := filepath.Join(dir, "s-1.ndjson")
	r := runSemaq(t, url, "", "provenance", "export", "s-1", "--stream", "AGENT", "--tenant", "acme", "-o", out)
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("export: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if want := fmt.Sprintf("Exported 5 links of session s-1 (stream AGENT) to %s; head %s\n", out, head.Hash); r.stderr != want {
		t.Fatalf("export said %q, want %q", r.stderr, want)
	}
	keys := mustSemaq(t, url, "", "provenance", "keys", "--json")
	var listed []semaq.ProvenanceKey
	if err := json.Unmarshal([]byte(keys), &listed); err != nil || len(listed) != 1 || listed[0].Node != "n1" {
		t.Fatalf("keys --json: %q (%v): want n1's key", keys, err)
	}
	keysFile := writeFile(t, keys)
	r = runOffline("", "provenance", "verify", out, "--key", keysFile, "--head", head.Hash)
	if want := "OK: 5 links of session s-1 (tenant acme) in stream AGENT, head " + head.Hash + ", signed by key " + listed[0].ID +
		" (n1), trusted, anchored at link 5\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("verify: exit %d, stdout %q, stderr %q\nwant %q", r.code, r.stdout, r.stderr, want)
	}
	// Another key pinned: no link verifies.
	r = runOffline("", "provenance", "verify", out, "--key", b64(provenancetest.Key(2)))
	if r.code != 1 || !strings.HasPrefix(r.stderr, "semaq: link 1 (stream seq ") ||
		!strings.Contains(r.stderr, "bad signature: key "+listed[0].ID+" (node n1) is not one of the trusted keys") {
		t.Fatalf("verify with another key: exit %d, stderr %q", r.code, r.stderr)
	}

	// To stdout: the same export but its time.
	toStdout := mustSemaq(t, url, "", "provenance", "export", "s-1", "--stream", "AGENT", "--tenant", "acme")
	file, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := withoutExportTime(t, file), withoutExportTime(t, []byte(toStdout)); a != b {
		t.Fatalf("export to stdout\n%s\ndiffers from the file\n%s", b, a)
	}

	table := mustSemaq(t, url, "", "provenance", "keys")
	if !strings.HasPrefix(table, "ID  ") ||
		!strings.Contains(table, listed[0].ID+"  n1    "+base64.StdEncoding.EncodeToString(listed[0].PublicKey)+"  "+listed[0].Created.Format(time.RFC3339)) {
		t.Fatalf("keys table:\n%s", table)
	}

	// A link the stream no longer holds: the export says so, verify names it.
	var link3 provenance.ExportLink
	if err := json.Unmarshal(bytes.Split(file, []byte("\n"))[3], &link3); err != nil {
		t.Fatal(err)
	}
	deleteMsg(t, srv, "AGENT", link3.Seq)
	cut := filepath.Join(dir, "cut.ndjson")
	r = runSemaq(t, url, "", "provenance", "export", "s-1", "--stream", "AGENT", "--tenant", "acme", "-o", cut)
	if r.code != 0 || !strings.Contains(r.stderr, "Exported 4 links") ||
		!strings.Contains(r.stderr, "semaq: warning: the chain has 5 links and the stream holds 4 of them") {
		t.Fatalf("export of a chain missing a link: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runOffline("", "provenance", "verify", cut)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "semaq: link 3 missing: link 2 (stream seq ") ||
		!strings.Contains(r.stderr, ") is followed by link 4 (stream seq ") {
		t.Fatalf("verify of a chain missing a link: exit %d, stderr %q", r.code, r.stderr)
	}

	// A session with no chain: an error, and no file.
	none := filepath.Join(dir, "none.ndjson")
	mustFailSemaq(t, url, `semaq: stream AGENT has no chain for session "s-9"`, "provenance", "export", "s-9", "--stream", "AGENT", "-o", none)
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("files left after a failed export: %v", entries)
	}
	mustFailSemaq(t, unreachableURL, "semaq: --stream is required", "provenance", "export", "s-1")
}

// deleteMsg removes a message from a stream, below the semantic layer.
func deleteMsg(t *testing.T, srv *broker.Server, stream string, seq uint64) {
	t.Helper()
	nc, err := brokertest.DialOperator(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, seq); err != nil {
		t.Fatal(err)
	}
}

// withoutExportTime is an export with its header's export time blanked.
func withoutExportTime(t *testing.T, b []byte) string {
	t.Helper()
	first, rest, _ := bytes.Cut(b, []byte("\n"))
	var h map[string]any
	if err := json.Unmarshal(first, &h); err != nil {
		t.Fatalf("header %q: %v", first, err)
	}
	delete(h, "exported")
	return string(mustJSON(t, h)) + "\n" + string(rest)
}

// TestStreamAddProvenanceFlags makes streams with provenance and a
// session order on a real broker and reads them back with `stream info`.
func TestStreamAddProvenanceFlags(t *testing.T) {
	url := brokertest.Start(t).ClientURL()
	for _, tc := range []struct {
		args              []string
		created           string
		provenance, order string // `stream info`'s lines; "": none
	}{
		{[]string{"AGENT", "--subjects", "agent.>", "--provenance", "signed", "--session-order", "strict"},
			"Stream AGENT created: subjects agent.>, retention limits, storage file, durability interval, provenance signed, session order strict\n",
			"signed (each session's messages hash-chained, each signed by its node)",
			"strict (a session's message not after its last, by AI-Timestamp, is refused)"},
		{[]string{"SESS", "--subjects", "sess.>", "--provenance", "Session", "--session-order", "strict-seq"},
			"Stream SESS created: subjects sess.>, retention limits, storage file, durability interval, provenance session, session order strict-seq\n",
			"session (each session's messages hash-chained)",
			"strict-seq (a session's message not after its last, by AI-Seq, is refused)"},
		{[]string{"PLAIN", "--subjects", "plain.>"},
			"Stream PLAIN created: subjects plain.>, retention limits, storage file, durability interval\n", "", ""},
	} {
		if out := mustSemaq(t, url, "", append([]string{"stream", "add"}, tc.args...)...); out != tc.created {
			t.Fatalf("stream add printed %q, want %q", out, tc.created)
		}
		info := mustSemaq(t, url, "", "stream", "info", tc.args[0])
		for label, want := range map[string]string{"Provenance:": tc.provenance, "Session order:": tc.order} {
			if v, ok := infoLine(info, label); want == "" && ok || want != "" && v != want {
				t.Fatalf("stream info %s:\n%s\nwants %s %q", tc.args[0], info, label, want)
			}
		}
	}
	mustFailSemaq(t, unreachableURL, `semaq: --provenance "chained": use session, signed`, "stream", "add", "X", "--subjects", "x.>", "--provenance", "chained")
	mustFailSemaq(t, unreachableURL, `semaq: --session-order "loose": use strict, strict-seq`, "stream", "add", "X", "--subjects", "x.>", "--session-order", "loose")
	r := runSemaq(t, unreachableURL, "", "stream", "add", "X", "--subjects", "x.>", "--provenence", "session")
	if r.code == 0 || !strings.Contains(r.stderr, "unknown flag: --provenence (did you mean --provenance?)") {
		t.Fatalf("a mistyped flag: exit %d, stderr %q", r.code, r.stderr)
	}
}

// infoLine is the value of the line of `stream info` labelled label.
func infoLine(out, label string) (string, bool) {
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), label); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// TestProvenanceVerifyHostileNames: names in an export are the export
// writer's; the verdict stays one short line whatever they are.
func TestProvenanceVerifyHostileNames(t *testing.T) {
	long := strings.Repeat("s", 200<<10)
	c := provenancetest.New("AGENT", "acme\nOK: forged", long).Signed("n1\r\nOK", provenancetest.Key(1))
	c.Add("agent.x", "1", nil)
	r := runOffline("", "provenance", "verify", writeFile(t, string(c.Export(t, nil, c.Links))))
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || len(r.stdout) > 400 {
		t.Fatalf("exit %d, stdout of %d bytes: %.400q", r.code, len(r.stdout), r.stdout)
	}
	if !strings.Contains(r.stdout, `(tenant "acme\nOK: forged")`) || !strings.Contains(r.stdout, `("n1\r\nOK")`) {
		t.Fatalf("the names are not quoted: %q", r.stdout)
	}
}
