package pii

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestRewriteStrings(t *testing.T) {
	upper := func(s string) (string, error) {
		if strings.Contains(s, "bad") {
			return "", errors.New("bad value")
		}
		return strings.ReplaceAll(s, "darn", "***"), nil
	}
	for _, tc := range []struct {
		name, in string
		paths    []string
		want     string
		changed  bool
		err      bool
	}{
		{"text", "oh darn it", nil, "oh *** it", true, false},
		{"json every string", `{"a":"darn","b":["x darn",1,{"c":"darn"}],"darn":2}`, nil, `{"a":"***","b":["x ***",1,{"c":"***"}],"darn":2}`, true, false},
		{"json paths", `{"messages":[{"role":"darn","content":"darn"}]}`, []string{"messages.*.content"}, `{"messages":[{"role":"darn","content":"***"}]}`, true, false},
		{"escapes kept valid", `{"a":"\"darn\"\n"}`, nil, `{"a":"\"***\"\n"}`, true, false},
		{"nothing", `{"a":"fine"}`, nil, `{"a":"fine"}`, false, false},
		{"error", `{"a":"bad"}`, nil, `{"a":"bad"}`, false, true},
		{"not json after all", `{"a": darn`, nil, `{"a": ***`, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, err := RewriteStrings([]byte(tc.in), tc.paths, upper)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if string(out) != tc.want || changed != tc.changed {
				t.Fatalf("got %s (changed %v), want %s (changed %v)", out, changed, tc.want, tc.changed)
			}
			if changed && strings.HasPrefix(tc.in, "{") && json.Valid([]byte(tc.in)) && !json.Valid(out) {
				t.Fatalf("output is not JSON: %s", out)
			}
		})
	}
	if _, _, err := RewriteStrings([]byte(`{}`), []string{"a..b"}, upper); err == nil {
		t.Fatal("a path with an empty segment was accepted")
	}
}
