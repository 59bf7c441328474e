package batchjson

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzParse holds the envelope reader to encoding/json: what it accepts is
// valid JSON, and reads as encoding/json reads it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"subject":"ai.x","headers":{"AI-Model":"m","X":["a","b"]},"data":{"a":[1,"}"]}}`,
		`{"subject":"a\u0069.x","data_base64":"AAH/"}`,
		`{"subject":"ai.x","data":"a\"}"}`,
		`{"subject":"ai.x","data":1 2}`,
		` { "subject" : "x" , "data" : null } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		var it struct {
			Subject string          `json:"subject"`
			Headers map[string]any  `json:"headers"`
			Data    json.RawMessage `json:"data"`
			Base64  []byte          `json:"data_base64"`
		}
		if err := json.Unmarshal(b, &it); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", b, err)
		}
		if it.Subject != m.Subject {
			t.Fatalf("%q: subject %q, encoding/json reads %q", b, m.Subject, it.Subject)
		}
		want := it.Base64
		if it.Data != nil {
			var c bytes.Buffer
			_ = json.Compact(&c, it.Data)
			want = c.Bytes()
		}
		if !bytes.Equal(want, m.Data) && (len(want) != 0 || len(m.Data) != 0) {
			t.Fatalf("%q: data %q, encoding/json reads %q", b, m.Data, want)
		}
		if len(it.Headers) != len(m.Header) {
			t.Fatalf("%q: %d headers, encoding/json reads %d", b, len(m.Header), len(it.Headers))
		}
	})
}
