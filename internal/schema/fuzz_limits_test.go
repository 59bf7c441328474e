package schema

import (
	"encoding/json"
	"errors"
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

// FuzzProtobufLimits: the Protobuf pre-scan never panics and, with tight
// limits, Parse refuses or accepts without hanging.
func FuzzProtobufLimits(f *testing.F) {
	for _, s := range []string{protoDeep(10), "syntax = \"proto3\"; message M { string s = 1 [(x) = {a:{b:1}}]; } /* { */ // {", `"\"{{{{`, "<<<<>"} {
		f.Add(s)
	}
	tight := protobufFormat{limits: Limits{MaxDepth: 4, MaxNodes: 200}}
	f.Fuzz(func(t *testing.T, text string) {
		_, err := tight.Parse(text, nil, nil)
		var le *LimitError
		if errors.As(err, &le) && le.Limit != "MaxDepth" && le.Limit != "MaxNodes" && le.Limit != "MaxSchemaBytes" {
			t.Fatalf("unexpected limit %s", le.Limit)
		}
	})
}
