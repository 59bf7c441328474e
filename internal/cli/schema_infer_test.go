package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestSchemaInfer(t *testing.T) {
	samples := `{"model":"llama3","max_tokens":256,"ts":"2026-11-30T10:00:00Z"}
{"model":"gemma2","max_tokens":64,"ts":"2026-11-30T10:00:01Z","stream":true}
`
	var out, errb bytes.Buffer
	if code := Main([]string{"schema", "infer"}, strings.NewReader(samples), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var s map[string]any
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if got, _ := json.Marshal(s["required"]); string(got) != `["max_tokens","model","ts"]` {
		t.Errorf("required = %s", got)
	}
	// The same samples from a file give the same bytes.
	f := filepath.Join(t.TempDir(), "samples.jsonl")
	if err := os.WriteFile(f, []byte(samples), 0o600); err != nil {
		t.Fatal(err)
	}
	var out2 bytes.Buffer
	if code := Main([]string{"schema", "infer", f}, strings.NewReader(""), &out2, &errb); code != 0 || out2.String() != out.String() {
		t.Fatalf("file run: exit %d, output differs:\n%s", code, out2.String())
	}
	// Bad input: one line naming the problem, non-zero exit.
	errb.Reset()
	if code := Main([]string{"schema", "infer"}, strings.NewReader("{\"a\":1}\nnot json\n"), &out, &errb); code == 0 || !strings.Contains(errb.String(), "line 2") {
		t.Fatalf("bad line: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := Main([]string{"schema", "infer"}, strings.NewReader(""), &out, &errb); code == 0 || !strings.Contains(errb.String(), "no samples") {
		t.Fatalf("empty input: exit %d, stderr %q", code, errb.String())
	}
}

func TestStreamAddWithSchema(t *testing.T) {
	srv := startChild(t, "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	dir := t.TempDir()
	schemaFile := filepath.Join(dir, "req.json")
	if err := os.WriteFile(schemaFile, []byte(`{"type":"object","required":["model"],"properties":{"model":{"type":"string"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(append(args, "--server", srv.url), strings.NewReader(stdin), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, stderr := run("", "stream", "add", "AI", "--subjects", "ai.>", "--schema", "req"); code == 0 || !strings.Contains(stderr, "req") {
		t.Fatalf("stream bound to an unregistered subject: exit %d %q", code, stderr)
	}
	// Register through the Confluent REST API of the same broker.
	info, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]string{"schema": string(info), "schemaType": "JSON"})
	httpAddr := regexpHTTP.FindStringSubmatch(srv.output())
	if httpAddr == nil {
		t.Fatalf("no http address in %s", srv.output())
	}
	resp, err := http.Post(httpAddr[1]+"/subjects/req/versions", "application/json", bytes.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("register: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, _, stderr := run("", "stream", "add", "AI", "--subjects", "ai.>", "--schema", "req"); code != 0 {
		t.Fatalf("stream add --schema: exit %d %q", code, stderr)
	}
	if code, out, _ := run("", "stream", "info", "AI"); code != 0 || !strings.Contains(out, "Schema:") || !strings.Contains(out, "req") {
		t.Fatalf("stream info: exit %d\n%s", code, out)
	}
	if code, _, _ := run("", "pub", "ai.x", `{"model":"llama3"}`); code != 0 {
		t.Fatal("valid payload refused")
	}
	code, _, stderr := run("", "pub", "ai.x", `{"prompt":"no model"}`)
	if code == 0 || !strings.Contains(stderr, "model") || !strings.Contains(stderr, "does not match schema") {
		t.Fatalf("invalid payload: exit %d %q", code, stderr)
	}
}

var regexpHTTP = regexp.MustCompile(`http=(https?://\S+)`)
