package filter

import (
	"errors"
	"testing"
)

func TestClosest(t *testing.T) {
	t.Parallel()
	names := []string{"confidence", "label", "model"}
	for _, tc := range []struct{ name, want string }{
		{"confidance", "confidence"},
		{"lable", "label"},
		{"modle", "model"},
		{"zzzzzzzz", ""},
		{"x", ""},
	} {
		if got := closest(tc.name, names); got != tc.want {
			t.Errorf("closest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLookupField(t *testing.T) {
	t.Parallel()
	schema := map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"properties": map[string]any{
			"confidence": map[string]any{"type": "number"},
			"meta":       map[string]any{"type": "object", "properties": map[string]any{"k": map[string]any{}}},
			"any":        map[string]any{"anyOf": []any{}},
		},
	}
	for _, tc := range []struct {
		path     []string
		declared bool
		closed   bool
		notObj   string
		at       int
	}{
		{[]string{"confidence"}, true, false, "", 0},
		{[]string{"confidance"}, false, true, "", 0},
		{[]string{"confidence", "x"}, false, false, "number", 1},
		{[]string{"meta", "k"}, true, false, "", 0},
		{[]string{"meta", "q"}, false, false, "", 1},
		{[]string{"any", "q"}, true, false, "", 0},
	} {
		v := lookupField(schema, tc.path)
		if v.declared != tc.declared || v.closed != tc.closed || v.notObj != tc.notObj || v.at != tc.at {
			t.Errorf("%v: %+v", tc.path, v)
		}
	}
}

func TestMissingField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  string
		want bool
	}{
		{"no such key: confidence", true},
		{"payload is not JSON: no such key", false},
		{"type mismatch", false},
	} {
		if got := missingField(errors.New(tc.err)); got != tc.want {
			t.Errorf("%q: %v", tc.err, got)
		}
	}
}
