package sessions

import (
	"encoding/json"
	"testing"
)

// A merge patch is client input the broker applies with its own rights:
// whatever the document and patch, it does not panic, the result is
// JSON, and applying the same patch again changes nothing (RFC 7396
// patches are idempotent).
func FuzzMergePatch(f *testing.F) {
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
		once, err := mergePatch([]byte(doc), []byte(patch))
		if err != nil {
			return
		}
		if !json.Valid(once) {
			t.Fatalf("merge(%s, %s) = %s: not JSON", doc, patch, once)
		}
		twice, err := mergePatch(once, []byte(patch))
		if err != nil || string(twice) != string(once) {
			t.Fatalf("applying %s again: %s, %v; was %s", patch, twice, err, once)
		}
	})
}
