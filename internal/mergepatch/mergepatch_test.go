package mergepatch

import (
	"encoding/json"
	"testing"
)

// The cases of RFC 7396's appendix A, and numbers kept as written.
func TestApply(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`["a","b"]`, `["c","d"]`, `["c","d"]`},
		{`{"a":"b"}`, `["c"]`, `["c"]`},
		{`{"a":"foo"}`, `null`, `null`},
		{`{"a":"foo"}`, `"bar"`, `"bar"`},
		{`{"e":null}`, `{"a":1}`, `{"a":1,"e":null}`},
		{`[1,2]`, `{"a":"b","c":null}`, `{"a":"b"}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
		{`{"n":9007199254740993}`, `{"m":1}`, `{"m":1,"n":9007199254740993}`},
		{``, `{"a":1}`, `{"a":1}`},
	} {
		got, err := Apply([]byte(tc.doc), []byte(tc.patch))
		if err != nil || string(got) != tc.want {
			t.Errorf("Apply(%s, %s) = %s, %v; want %s", tc.doc, tc.patch, got, err, tc.want)
		}
	}
	for _, bad := range [][2]string{{`{`, `{}`}, {`{} {}`, `{}`}, {`{}`, `{"a":`}, {`{}`, `1 2`}} {
		if _, err := Apply([]byte(bad[0]), []byte(bad[1])); err == nil {
			t.Errorf("Apply(%s, %s): no error", bad[0], bad[1])
		}
	}
}

// A merge patch is client input the broker applies with its own rights:
// whatever the document and patch, it does not panic, the result is
// JSON, and applying the same patch again changes nothing (RFC 7396
// patches are idempotent).
func FuzzApply(f *testing.F) {
	for _, seed := range [][2]string{
		{`{"a":"b"}`, `{"a":null}`},
		{`{"a":{"b":1}}`, `{"a":{"c":[1,2]}}`},
		{`{}`, `{"n":12345678901234567890}`},
		{`{"a":1}`, `[1]`},
		{`{"a":1}`, `{"a":{"b":{"c":null}}}`},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, doc, patch string) {
		if !json.Valid([]byte(doc)) || !json.Valid([]byte(patch)) {
			return
		}
		once, err := Apply([]byte(doc), []byte(patch))
		if err != nil {
			return
		}
		if !json.Valid(once) {
			t.Fatalf("Apply(%s, %s) = %s: not JSON", doc, patch, once)
		}
		twice, err := Apply(once, []byte(patch))
		if err != nil || string(twice) != string(once) {
			t.Fatalf("applying %s again: %s, %v; was %s", patch, twice, err, once)
		}
	})
}
