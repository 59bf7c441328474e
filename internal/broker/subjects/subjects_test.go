package subjects

import (
	"strings"
	"testing"

	"github.com/semaq/semaq/semaq"
)

func TestSubjectMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"ai.x", "ai.x", true},
		{"ai.x", "ai.y", false},
		{"ai.x", "ai.x.y", false},
		{"ai.x.y", "ai.x", false},
		{"ai.*", "ai.x", true},
		{"ai.*", "ai.x.y", false},
		{"ai.*", "ai", false},
		{"ai.>", "ai.x", true},
		{"ai.>", "ai.x.y.z", true},
		{"ai.>", "ai", false},
		{">", "ai", true},
		{"*", "ai", true},
		{"*", "ai.x", false},
		{"*.x.>", "ai.x.y", true},
		{"*.x.>", "ai.y.y", false},
		{"ai.inference.llm", "ai.inference.llmx", false},
		{"ai.inference.llmx", "ai.inference.llm", false},
	} {
		if got := Match(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("Match(%q, %q) = %v", tc.pattern, tc.subject, got)
		}
	}
}

func TestOverlap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"ai.x", "ai.x", true},
		{"ai.x", "ai.y", false},
		{"ai.*", "ai.x", true},
		{"ai.*", "ai.x.y", false},
		{"ai.>", "ai.x.y", true},
		{"ai.>", "ai", false},
		{"*.x", "ai.*", true},
		{"ai.x", "ai.x.y", false},
		{">", "ai", true},
	} {
		if got := Overlap(tc.a, tc.b); got != tc.want {
			t.Errorf("Overlap(%q, %q) = %v", tc.a, tc.b, got)
		}
		if got := Overlap(tc.b, tc.a); got != tc.want {
			t.Errorf("Overlap(%q, %q) = %v", tc.b, tc.a, got)
		}
	}
}

// refMatches is the obvious implementation Match must agree with.
func refMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) || p != "*" && p != st[i] {
			return false
		}
	}
	return len(pt) == len(st)
}

func FuzzSubjectMatches(f *testing.F) {
	f.Add("ai.>", "ai.x.y")
	f.Add("*.x", "a.x")
	f.Add("a.b.c", "a.b")
	f.Fuzz(func(t *testing.T, pattern, subject string) {
		if semaq.CheckSubject(pattern, true) != nil || semaq.CheckSubject(subject, false) != nil {
			return
		}
		if got, want := Match(pattern, subject), refMatches(pattern, subject); got != want {
			t.Fatalf("Match(%q, %q) = %v, want %v", pattern, subject, got, want)
		}
	})
}
