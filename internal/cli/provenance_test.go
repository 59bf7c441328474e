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

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/jstest"
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

// TestProvenanceExportCommand exports a chain from a stand-in for the
// broker's side of provenance and verifies it with the nodes' keys as
// `semaq provenance keys --json` prints them.
func TestProvenanceExportCommand(t *testing.T) {
	ns := jstest.Server(t)
	nc, js := jstest.Connect(t, ns)
	url := ns.ClientURL()
	b := provenancetest.NewBroker(t, nc, semaq.StreamConfig{Name: "AGENT", Subjects: []string{"agent.>"}, Provenance: semaq.ProvenanceSigned})
	b.AddKey("n1", provenancetest.Key(1))
	c := provenancetest.New("AGENT", "acme", "s-1").Signed("n1", provenancetest.Key(1))
	for k := range 5 {
		c.Add("agent.acme.step", fmt.Sprint(k), nil)
		b.Other(t, "agent.acme.step", map[string][]string{"AI-Session": {"s-2"}, "AI-Tenant": {"acme"}})
	}
	head := b.Store(t, c, 0)

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
	keysFile := writeFile(t, keys)
	r = runOffline("", "provenance", "verify", out, "--key", keysFile, "--head", head.Hash)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "OK: 5 links of session s-1 (tenant acme) in stream AGENT") ||
		!strings.HasSuffix(r.stdout, ", trusted, anchored at link 5\n") {
		t.Fatalf("verify: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
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
	id := provenance.KeyID(provenancetest.Key(1).Public().(ed25519.PublicKey))
	if !strings.HasPrefix(table, "ID  ") || !strings.Contains(table, id+"  n1    "+b64(provenancetest.Key(1))+"  2026-01-02T03:04:05Z") {
		t.Fatalf("keys table:\n%s", table)
	}

	// A link the stream no longer holds: the export says so, verify names it.
	var link3 provenance.ExportLink
	if err := json.Unmarshal(bytes.Split(file, []byte("\n"))[3], &link3); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "AGENT")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, link3.Seq); err != nil {
		t.Fatal(err)
	}
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
	mustFailSemaq(t, url, "semaq: no provenance chain for session s-9 in stream AGENT", "provenance", "export", "s-9", "--stream", "AGENT", "-o", none)
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("files left after a failed export: %v", entries)
	}
	mustFailSemaq(t, unreachableURL, "semaq: --stream is required", "provenance", "export", "s-1")
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

// TestStreamAddProvenanceFlags checks what `stream add` asks the broker
// for and prints, against a stand-in for the stream API.
func TestStreamAddProvenanceFlags(t *testing.T) {
	ns := jstest.Server(t)
	nc, _ := jstest.Connect(t, ns)
	asked := make(chan semaq.StreamConfig, 1)
	sub, err := nc.Subscribe(fmt.Sprintf(semaq.APIStreamCreateT, "AGENT"), func(m *nats.Msg) {
		var cfg semaq.StreamConfig
		_ = json.Unmarshal(m.Data, &cfg)
		asked <- cfg
		_ = m.Respond(mustJSON(t, semaq.StreamInfo{Config: cfg, Sync: "always"}))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	out := mustSemaq(t, ns.ClientURL(), "", "stream", "add", "AGENT", "--subjects", "agent.>", "--provenance", "Signed", "--session-order", "strict-seq")
	var cfg semaq.StreamConfig
	select {
	case cfg = <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("stream add asked nothing")
	}
	if cfg.Provenance != semaq.ProvenanceSigned || cfg.SessionOrder != semaq.SessionOrderStrictSeq {
		t.Fatalf("stream add asked for provenance %q, session order %q", cfg.Provenance, cfg.SessionOrder)
	}
	if want := "Stream AGENT created: subjects agent.>, retention limits, storage file, durability fsync, provenance signed, session order strict-seq\n"; out != want {
		t.Fatalf("stream add printed %q, want %q", out, want)
	}
	mustFailSemaq(t, unreachableURL, `semaq: --provenance "chained": use session, signed`, "stream", "add", "X", "--subjects", "x.>", "--provenance", "chained")
	mustFailSemaq(t, unreachableURL, `semaq: --session-order "loose": use strict, strict-seq`, "stream", "add", "X", "--subjects", "x.>", "--session-order", "loose")
	r := runSemaq(t, unreachableURL, "", "stream", "add", "X", "--subjects", "x.>", "--provenence", "session")
	if r.code == 0 || !strings.Contains(r.stderr, "unknown flag: --provenence (did you mean --provenance?)") {
		t.Fatalf("a mistyped flag: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestStreamInfoShowsProvenance(t *testing.T) {
	ns := jstest.Server(t)
	nc, _ := jstest.Connect(t, ns)
	provenancetest.NewBroker(t, nc, semaq.StreamConfig{Name: "AGENT", Subjects: []string{"agent.>"},
		Provenance: semaq.ProvenanceSession, SessionOrder: semaq.SessionOrderStrict})
	out := mustSemaq(t, ns.ClientURL(), "", "stream", "info", "AGENT")
	for label, want := range map[string]string{
		"Provenance:":    "session (each session's messages hash-chained)",
		"Session order:": "strict (a session's message not after its last, by AI-Timestamp, is refused)",
	} {
		if v, ok := infoLine(out, label); !ok || v != want {
			t.Fatalf("stream info:\n%s\nwants %s %s", out, label, want)
		}
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
