package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// FuzzStrictJSON: the pre-compile scanner never panics, refuses only with
// a LimitError or a DuplicateKeyError, and never refuses a small document
// without duplicate keys or huge numbers that encoding/json accepts.
func FuzzStrictJSON(f *testing.F) {
	for _, s := range []string{`{"type":"string","type":"object"}`, `{"a":[1,2,{"b":1e999999}]}`, `[[[[[]]]]]`, `{"t\u0079pe":1,"type":2}`,
		`{"schema":"x","Schema":"y"}`, `"str"`, `1.5e-3`, `{"a":`, jsonDeep(40), patternProps(3, "[a-z]")} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, fold bool) {
		err := StrictJSON(data, Limits{}, fold)
		if err == nil {
			return
		}
		var de *DuplicateKeyError
		if errors.As(err, &de) {
			if !fold && !strings.Contains(string(data), de.Key[:min(len(de.Key), 1)]) {
				t.Fatalf("duplicate key %q not in the text", de.Key)
			}
			return
		}
		var le *LimitError
		if !errors.As(err, &le) {
			t.Fatalf("unexpected error type %T: %v", err, err)
		}
		if len(data) < 60 && json.Valid(data) && !strings.HasPrefix(le.Limit, "MaxNumber") {
			t.Fatalf("small valid document refused: %v", err)
		}
	})
}

func TestStrictJSONFoldCase(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"schema":"a","Schema":"b"}`, `{"references":[{"name":"a","NAME":"b"}]}`, `{"schema":"a","schema":"b"}`} {
		var de *DuplicateKeyError
		if err := StrictJSON([]byte(body), Limits{}, true); !errors.As(err, &de) {
			t.Errorf("%s: error %v, want a DuplicateKeyError", body, err)
		}
	}
	if err := StrictJSON([]byte(`{"schema":"a","schemaType":"JSON","references":[{"name":"x"}],"metadata":{"a":1}}`), Limits{}, true); err != nil {
		t.Fatalf("ordinary body refused: %v", err)
	}
	if err := StrictJSON([]byte(`{"a":[`+strings.Repeat("[", 100)), Limits{}, true); !errors.Is(err, ErrLimit) {
		t.Fatalf("deep body: %v, want ErrLimit", err)
	}
}

// The seeds' shapes, as the hostile-schema tests in package formats build
// them.
func jsonDeep(n int) string {
	return strings.Repeat(`{"properties":{"a":`, n) + `{"type":"string"}` + strings.Repeat(`}}`, n)
}

func patternProps(n int, re string) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","patternProperties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"^x%d%s$":{"type":"string"}`, i, re)
	}
	b.WriteString(`}}`)
	return b.String()
}
