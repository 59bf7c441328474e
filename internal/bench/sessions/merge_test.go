package sessions

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The cases of RFC 7396's appendix A, on an object document (the only
// kind a session holds), and a document that is not one.
func TestMergePatch(t *testing.T) {
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
		{`{"e":null}`, `{"a":1}`, `{"a":1,"e":null}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
		{`{"a":"b"}`, `{}`, `{"a":"b"}`},
	} {
		got, err := mergePatch([]byte(tc.doc), []byte(tc.patch))
		if err != nil {
			t.Errorf("%s + %s: %v", tc.doc, tc.patch, err)
			continue
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(tc.want), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s + %s = %s, want %s", tc.doc, tc.patch, got, tc.want)
		}
	}
	for _, doc := range []string{`["a"]`, `"a"`, `{`, `{} {}`} {
		if _, err := mergePatch([]byte(doc), []byte(`{"a":1}`)); err == nil {
			t.Errorf("document %s: patched, want an error", doc)
		}
	}
}

// A patch is exactly the size asked for, valid JSON, and carries its turn.
func TestBuildPatch(t *testing.T) {
	t.Parallel()
	for _, size := range []int{MinSize, 200, 1000, MaxSize} {
		b := buildPatch(12345, size)
		var p struct {
			Turn    int    `json:"turn"`
			Summary string `json:"summary"`
		}
		if err := json.Unmarshal(b, &p); err != nil || len(b) != size || p.Turn != 12345 || p.Summary == "" {
			t.Errorf("size %d: %d bytes, turn %d, err %v: %.80s", size, len(b), p.Turn, err, b)
		}
	}
}
