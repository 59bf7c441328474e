package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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
