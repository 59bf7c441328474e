package cli

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/plugin/plugintest"
	"github.com/semaq/semaq/semaq"
)

// writeNamed writes data to name in a temporary directory and returns its path.
func writeNamed(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Flag mistakes are refused before anything dials, naming the flag.
func TestPolicyFlagErrors(t *testing.T) {
	t.Parallel()
	bigWords := writeNamed(t, "big.txt", []byte(strings.Repeat("word\n", semaq.MaxPolicyWordBytes/5+1)))
	noWords := writeNamed(t, "none.txt", []byte("# only a comment\n\n"))
	notWasm := writeNamed(t, "x.wasm", []byte("#!/bin/sh\n"))
	wasm := writeNamed(t, "ok.wasm", []byte("\x00asm\x01\x00\x00\x00"))
	shortSig := writeNamed(t, "sig", []byte(base64.StdEncoding.EncodeToString(make([]byte, 32))))
	sample := writeNamed(t, "sample.json", []byte(`{"a":"b"}`))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "add", "p", "--redact", "email"}, "--subjects PATTERNS or --streams"},
		{[]string{"policy", "add", "p", "--subjects", "ai.>"}, "the rule does nothing"},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--redact", "email,emial"}, `--redact: "emial" is not a PII type`},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--redact", "email", "--action", "shred"}, `--action "shred": use mask, hash, tokenize, block`},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--words", "x", "--action", "mask"}, "--action needs --redact"},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--redact", "email", "--action-for", "card=block"}, "card is not among the --redact types"},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--redact", "card", "--action-for", "card"}, "--action-for \"card\": want TYPE=ACTION"},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--redact", "email", "--on-match", "stop"}, "--on-match needs --words"},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--words", "x", "--on-match", "shout"}, `--on-match "shout": use mask, stop, flag`},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--patterns", "a(b"}, `--patterns "a(b": error parsing regexp`},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--block-words", bigWords}, "--block-words: " + bigWords + " is larger than a rule's words may be (64.0 KiB)"},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--block-words", noWords}, "holds no words"},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--block-words", filepath.Join(t.TempDir(), "missing")}, "--block-words: open"},
		{[]string{"policy", "add", "p", "--subjects", "ai..x", "--redact", "email"}, `--subjects "ai..x"`},
		{[]string{"policy", "add", "p", "--streams", "a.b", "--redact", "email"}, `--streams "a.b"`},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--redcat", "email"}, "unknown flag: --redcat"},
		{[]string{"policy", "add", "p", "--subjects", "ai.>", "--redact", "email", "--paths", "a..b"}, `--paths: "a..b" is not a dotted path`},
		{[]string{"policy", "test", sample}, "name a stored rule"},
		{[]string{"policy", "test", "p", sample, "--redact", "email"}, "not both"},
		{[]string{"policy", "restore", "<EMAIL_1>"}, "--scope: name the vault scope"},
		{[]string{"plugin", "add", "x", wasm}, "--stage: say where the plugin runs"},
		{[]string{"plugin", "add", "x", wasm, "--stage", "ingress"}, "--subjects: name the subjects the ingress plugin runs on"},
		{[]string{"plugin", "add", "x", wasm, "--stage", "filter", "--subjects", "a"}, "a filter plugin runs on the subscriptions that name it"},
		{[]string{"plugin", "add", "x", wasm, "--stage", "egress"}, `--stage "egress": use ingress, filter, tokens`},
		{[]string{"plugin", "add", "x", wasm, "--stage", "ingress", "--subjects", "a", "--timeout", "6s"}, "--timeout 6s: want more than 0 and at most 5s"},
		{[]string{"plugin", "add", "x", wasm, "--stage", "ingress", "--subjects", "a", "--on-failure", "retry"}, `--on-failure "retry": use reject, pass`},
		{[]string{"plugin", "add", "x", wasm, "--stage", "ingress", "--subjects", "a", "--fail-after", "0"}, "--fail-after 0: want at least 1"},
		{[]string{"plugin", "add", "x", wasm, "--stage", "ingress", "--subjects", "a", "--memory", "2048"}, "--memory 2048: want 1 to 1024"},
		{[]string{"plugin", "add", "x", wasm, "--stage", "ingress", "--subjects", "a", "--signature", shortSig}, "holds 32 bytes in base64; an ed25519 signature has 64"},
		{[]string{"plugin", "add", "x", notWasm, "--stage", "ingress", "--subjects", "a"}, "is not a WASM module"},
	} {
		r := mustFailSemaq(t, unreachableURL, tc.want, tc.args...)
		if strings.Contains(r.stderr, "127.0.0.1:1") {
			t.Errorf("%v dialled before checking its flags: %s", tc.args, r.stderr)
		}
	}
	// policy test exits 2 when it cannot run, as route test does.
	if r := runSemaq(t, unreachableURL, "", "policy", "test", sample); r.code != 2 {
		t.Errorf("policy test without a rule: exit %d, want 2", r.code)
	}
}

func TestPolicyCommands(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	mustSemaq(t, url, "", "stream", "add", "AI", "--subjects", "ai.>")
	if out := mustSemaq(t, url, "", "policy", "ls"); strings.TrimSpace(out) != "No policies." {
		t.Fatalf("ls with no rules: %q", out)
	}
	out := mustSemaq(t, url, "", "policy", "add", "pii-in", "--subjects", "ai.inference.>", "--redact", "email,card",
		"--action", "tokenize", "--action-for", "card=block")
	if want := "Policy pii-in added: ai.inference.>: redact email,card tokenize (card block)"; strings.TrimSpace(out) != want {
		t.Fatalf("add printed %q, want %q", out, want)
	}
	words := writeNamed(t, "words.txt", []byte("# brand safety\n\nacme sucks\n  Globex  \n"))
	mustSemaq(t, url, "", "policy", "add", "brand-safety", "--streams", "tokens", "--block-words", words, "--words", "initech", "--on-match", "stop")
	mustFailSemaq(t, url, "policy pii-in already exists", "policy", "add", "pii-in", "--subjects", "ai.>", "--redact", "email")

	var info semaq.PolicyInfo
	if err := json.Unmarshal([]byte(mustSemaq(t, url, "", "policy", "get", "brand-safety", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	if strings.Join(info.Words, "|") != "acme sucks|Globex|initech" || info.OnMatch != semaq.ContentStop || info.Streams[0] != "tokens" {
		t.Fatalf("get --json = %+v", info)
	}

	// Publish through the rule and read the stored message back.
	mustSemaq(t, url, "", "pub", "ai.inference.llm", `{"prompt":"mail ada@example.com"}`, "--msg-id", "req-1")
	var msg struct {
		Headers map[string]string
		Data    string
	}
	if err := json.Unmarshal([]byte(mustSemaq(t, url, "", "sub", "ai.inference.llm", "--count", "1", "--json")), &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Data != `{"prompt":"mail <EMAIL_1>"}` || msg.Headers[semaq.HdrPIIScope] != "r.req-1" {
		t.Fatalf("stored %+v", msg)
	}
	out = mustSemaq(t, url, "", "policy", "restore", "--scope", "r.req-1", "Dear <EMAIL_1>")
	if out != "Dear ada@example.com\n" {
		t.Fatalf("restore printed %q", out)
	}
	if out := mustSemaq(t, url, "Dear <EMAIL_1>\n", "policy", "restore", "--scope", "r.req-1", "-"); out != "Dear ada@example.com\n" {
		t.Fatalf("restore from stdin printed %q", out)
	}
	mustFailSemaq(t, url, `no tokenized values for scope "r.req-9"`, "policy", "restore", "--scope", "r.req-9", "<EMAIL_1>")

	out = mustSemaq(t, url, "", "policy", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "brand-safety") ||
		!strings.Contains(lines[1], "3 words stop") || !strings.Contains(lines[2], "pii-in") || !strings.Contains(lines[2], "email=1") {
		t.Fatalf("ls:\n%s", out)
	}

	// test: the findings and the rewritten sample; exit 1 when blocked.
	out = mustSemaq(t, url, `{"prompt":"mail ada@example.com"}`, "policy", "test", "pii-in", "-")
	if !strings.Contains(out, "email") || !strings.Contains(out, "/prompt") || !strings.Contains(out, "tokenize") ||
		!strings.Contains(out, `{"prompt":"mail <EMAIL_1>"}`) {
		t.Fatalf("test printed:\n%s", out)
	}
	card := writeNamed(t, "card.json", []byte(`{"note":"card 4111 1111 1111 1111"}`))
	r := runSemaq(t, url, "", "policy", "test", "pii-in", card)
	if r.code != 1 || !strings.Contains(r.stdout, "Blocked:") || !strings.Contains(r.stderr, "card") || strings.Contains(r.stdout+r.stderr, "4111") {
		t.Fatalf("test of a blocked sample: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	out = mustSemaq(t, url, "call 10.1.2.3", "policy", "test", "--redact", "ip", "--action", "mask", "-")
	if !strings.Contains(out, "ip") || !strings.Contains(out, "call [IP]") {
		t.Fatalf("test of an unsaved rule printed:\n%s", out)
	}

	out = mustSemaq(t, url, "", "policy", "rm", "pii-in")
	if strings.TrimSpace(out) != "Policy pii-in removed." {
		t.Fatalf("rm printed %q", out)
	}
	mustFailSemaq(t, url, "policy pii-in not found", "policy", "get", "pii-in")
	mustFailSemaq(t, url, "policy pii-in not found", "policy", "rm", "pii-in")
}

func TestPluginCommands(t *testing.T) {
	t.Parallel()
	wasm := writeNamed(t, "enrich.wasm", plugintest.Build(t, plugintest.Enrich))
	url := brokertest.Start(t).ClientURL()
	mustSemaq(t, url, "", "stream", "add", "DEMO", "--subjects", "demo.>")
	if out := mustSemaq(t, url, "", "plugin", "ls"); strings.TrimSpace(out) != "No plugins." {
		t.Fatalf("ls with no plugins: %q", out)
	}
	out := mustSemaq(t, url, "", "plugin", "add", "enrich", wasm, "--stage", "ingress", "--subjects", "demo.>", "--timeout", "5s") // the module's start gets 30s
	if !strings.HasPrefix(out, "Plugin enrich added: ingress on demo.> (sha256 ") {
		t.Fatalf("add printed %q", out)
	}
	mustFailSemaq(t, url, "plugin enrich already exists", "plugin", "add", "enrich", wasm, "--stage", "ingress", "--subjects", "demo.>")

	mustSemaq(t, url, "", "pub", "demo.x", `{"model":"llama3"}`)
	var msg struct{ Headers map[string]string }
	if err := json.Unmarshal([]byte(mustSemaq(t, url, "", "sub", "demo.x", "--count", "1", "--json")), &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Headers["X-Payload-Length"] != "18" {
		t.Fatalf("stored headers %v: the plugin did not run", msg.Headers)
	}
	out = mustSemaq(t, url, "", "plugin", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "enrich") ||
		!strings.Contains(lines[1], "ingress") || !strings.Contains(lines[1], "running") {
		t.Fatalf("ls:\n%s", out)
	}
	var list []semaq.PluginInfo
	if err := json.Unmarshal([]byte(mustSemaq(t, url, "", "plugin", "ls", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Stats.Calls != 1 || list[0].Timeout != semaq.MaxPluginTime {
		t.Fatalf("ls --json = %+v", list)
	}
	if out := mustSemaq(t, url, "", "plugin", "rm", "enrich"); strings.TrimSpace(out) != "Plugin enrich removed." {
		t.Fatalf("rm printed %q", out)
	}
	mustFailSemaq(t, url, "plugin enrich not found", "plugin", "rm", "enrich")
}
