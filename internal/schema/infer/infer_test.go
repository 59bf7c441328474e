package infer_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/schema/infer"
)

func inferLines(t *testing.T, lines ...string) map[string]any {
	t.Helper()
	var in infer.Inferrer
	if err := in.ReadLines(strings.NewReader(strings.Join(lines, "\n"))); err != nil {
		t.Fatal(err)
	}
	b, err := in.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestInferRequest(t *testing.T) {
	s := inferLines(t,
		`{"id":"2d7f1c7e-1b2a-4c3d-8e9f-0a1b2c3d4e5f","model":"llama3","ts":"2026-11-30T10:00:00Z","role":"user","max_tokens":256,"temperature":0.7,"messages":[{"role":"user","content":"hi"}],"meta":{"source":"https://example.com/a"}}`,
		`{"id":"0b5c3a1e-9d8f-4e7a-b6c5-d4e3f2a1b0c9","model":"llama3","ts":"2026-11-30T10:00:01.5Z","role":"user","max_tokens":512,"temperature":1,"messages":[],"meta":{"source":"https://example.com/b","user":"a@example.com"}}`,
		``,
		`{"id":"9e8d7c6b-5a4f-4e3d-9c2b-1a0f9e8d7c6b","model":"gemma2","ts":"2026-11-30T10:00:02Z","role":"system","max_tokens":128,"temperature":0.2,"messages":[{"role":"assistant","content":"ok","name":"x"}],"meta":{"source":"https://example.com/c"},"extra":null}`,
	)
	for _, c := range []struct {
		path []string
		want string
	}{
		{[]string{"$schema"}, `"https://json-schema.org/draft/2020-12/schema"`},
		{[]string{"type"}, `"object"`},
		{[]string{"required"}, `["id","max_tokens","messages","meta","model","role","temperature","ts"]`},
		{[]string{"properties", "id", "format"}, `"uuid"`},
		{[]string{"properties", "ts", "format"}, `"date-time"`},
		{[]string{"properties", "max_tokens", "type"}, `"integer"`},
		{[]string{"properties", "temperature", "type"}, `"number"`},
		{[]string{"properties", "model", "enum"}, `null`}, // 2 values in 3 samples: too few repeats
		{[]string{"properties", "messages", "type"}, `"array"`},
		{[]string{"properties", "messages", "items", "required"}, `["content","role"]`},
		{[]string{"properties", "meta", "properties", "source", "format"}, `"uri"`},
		{[]string{"properties", "meta", "properties", "user", "format"}, `"email"`},
		{[]string{"properties", "meta", "required"}, `["source"]`},
		{[]string{"properties", "extra", "type"}, `"null"`},
	} {
		if got := js(get(s, c.path...)); got != c.want {
			t.Errorf("%s = %s, want %s", strings.Join(c.path, "."), got, c.want)
		}
	}
}

func TestInferEnumAndMixedTypes(t *testing.T) {
	var lines []string
	for i := range 9 {
		lines = append(lines, js(map[string]any{"priority": []string{"high", "low", "normal"}[i%3], "n": []any{1, "x", nil}[i%3]}))
	}
	s := inferLines(t, lines...)
	if got := js(get(s, "properties", "priority", "enum")); got != `["high","low","normal"]` {
		t.Errorf("enum = %s", got)
	}
	if got := js(get(s, "properties", "n", "type")); got != `["integer","string","null"]` {
		t.Errorf("mixed type = %s", got)
	}
}

func TestInferDeterministic(t *testing.T) {
	lines := []string{`{"b":1,"a":{"z":true,"y":[1,2.5]}}`, `{"a":{"y":[],"z":false},"b":2,"c":"x"}`}
	var first string
	for i := range 20 {
		var in infer.Inferrer
		if err := in.ReadLines(strings.NewReader(strings.Join(lines, "\n"))); err != nil {
			t.Fatal(err)
		}
		b, err := in.JSON()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = string(b)
		} else if string(b) != first {
			t.Fatalf("run %d differs:\n%s\n%s", i, first, b)
		}
	}
	if !strings.Contains(first, `"type": "number"`) {
		t.Errorf("array of 1 and 2.5 should be number items:\n%s", first)
	}
}

func TestInferErrors(t *testing.T) {
	var in infer.Inferrer
	err := in.ReadLines(strings.NewReader("{\"a\":1}\n\n{\"a\":\n"))
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("bad line: %v", err)
	}
	var empty infer.Inferrer
	if err := empty.ReadLines(strings.NewReader("\n \n")); err != nil {
		t.Fatal(err)
	}
	if _, err := empty.JSON(); !errors.Is(err, infer.ErrNoSamples) {
		t.Errorf("no samples: %v", err)
	}
	var two infer.Inferrer
	if err := two.AddJSON([]byte(`{} {}`)); err == nil {
		t.Error("two values on one line accepted")
	}
}

func TestInferDepthBounded(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 200)
	var in infer.Inferrer
	if err := in.AddJSON([]byte(deep)); err != nil {
		t.Fatal(err)
	}
	if _, err := in.JSON(); err != nil {
		t.Fatal(err)
	}
}

// FuzzInfer feeds arbitrary lines: never panics, and whatever it returns is
// valid JSON.
func FuzzInfer(f *testing.F) {
	f.Add("{\"a\":1}\n{\"a\":\"x\",\"b\":[1,{\"c\":null}]}")
	f.Add("[1,2,3]\n\"s\"\nnull")
	f.Add("{\"t\":\"2026-01-01T00:00:00Z\"}")
	f.Fuzz(func(t *testing.T, data string) {
		var in infer.Inferrer
		if err := in.ReadLines(strings.NewReader(data)); err != nil {
			return
		}
		b, err := in.JSON()
		if err != nil {
			if !errors.Is(err, infer.ErrNoSamples) {
				t.Fatal(err)
			}
			return
		}
		if !json.Valid(b) {
			t.Fatalf("invalid JSON output: %s", b)
		}
	})
}

// Closed closes every object, nested and in arrays; the default leaves
// them open.
func TestInferClosed(t *testing.T) {
	sample := `{"id":"a","meta":{"k":"v"},"items":[{"n":1}],"tags":["x"]}`
	for _, closed := range []bool{false, true} {
		in := infer.Inferrer{Closed: closed}
		if err := in.AddJSON([]byte(sample)); err != nil {
			t.Fatal(err)
		}
		s, err := in.Schema()
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range [][]string{{}, {"properties", "meta"}, {"properties", "items", "items"}} {
			got := get(s, append(path, "additionalProperties")...)
			if closed && got != false || !closed && got != nil {
				t.Errorf("closed=%v: additionalProperties at %v = %v", closed, path, got)
			}
		}
		if got := get(s, "properties", "tags", "additionalProperties"); got != nil {
			t.Errorf("closed=%v: an array of strings got additionalProperties %v", closed, got)
		}
	}
}
