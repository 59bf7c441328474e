package streamfilter

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Compile refuses bad rules and options with an error naming the rule and
// the problem.
func TestCompileErrors(t *testing.T) {
	t.Parallel()
	ok := Rule{Name: "ok", Pattern: `x`, Action: Flag}
	for _, tc := range []struct {
		rules []Rule
		o     Options
		want  string
	}{
		{[]Rule{{Pattern: `x`, Action: Mask}}, Options{}, `rule 0 (""): no name`},
		{[]Rule{ok, {Name: "b", Pattern: `x(`, Action: Mask}}, Options{}, `rule 1 ("b"): pattern: error parsing regexp: missing closing )`},
		{[]Rule{{Name: "e", Pattern: `a*`, Action: Mask}}, Options{}, `rule 0 ("e"): pattern can match the empty string`},
		{[]Rule{{Name: "e", Pattern: `\b`, Action: Mask}}, Options{}, `pattern can match the empty string`},
		{[]Rule{{Name: "e", Action: Mask}}, Options{}, `rule 0 ("e"): empty pattern`},
		{[]Rule{{Name: "n", Pattern: `x`}}, Options{}, `rule 0 ("n"): action Action(0) is not mask, stop or flag`},
		{[]Rule{{Name: "r", Pattern: `x`, Action: Flag, Replace: "y"}}, Options{}, `a replacement is only for mask rules, not flag`},
		{[]Rule{ok, ok}, Options{}, `rule 1 ("ok"): name already used by rule 0`},
		{[]Rule{{Name: "big", Pattern: strings.Repeat("a", maxPatternBytes+1), Action: Flag}}, Options{}, `more than 262144`},
		{[]Rule{{Name: "rep", Pattern: `(?:x{1000}){1000}`, Action: Flag}}, Options{}, `rule 0 ("rep"): pattern:`},
	} {
		_, err := Compile(tc.rules, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidRule) {
			t.Errorf("Compile(%.60v): %v; want %q matching ErrInvalidRule", tc.rules, err, tc.want)
		}
	}
	for _, tc := range []struct {
		n    int
		o    Options
		want string
	}{
		{3, Options{MaxRules: 2}, "3 rules, more than 2"},
		{1, Options{MaxHold: -1}, "MaxHold -1"},
		{1, Options{MaxHold: 2 << 20}, "MaxHold 2097152"},
		{1, Options{MaxRules: -1}, "MaxRules -1"},
	} {
		rules := make([]Rule, tc.n)
		for i := range rules {
			rules[i] = Rule{Name: fmt.Sprint(i), Pattern: "x", Action: Flag}
		}
		if _, err := Compile(rules, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Compile with %+v: %v; want %q", tc.o, err, tc.want)
		}
	}
}

// A pattern is taken as written, \Q included, however it is wrapped inside.
func TestPatternQuoted(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{}, Rule{Name: "q", Pattern: `\Q(a)`, Action: Mask, Replace: "Q"})
	if out, _, _, _ := filterChunks(set, []string{"x (a) y"}); out != "x Q y" {
		t.Fatalf("got %q", out)
	}
}

// WordRules keeps to its bounds and says which entry is wrong.
func TestWordRulesErrors(t *testing.T) {
	t.Parallel()
	many := make([]string, maxWords+1)
	for i := range many {
		many[i] = fmt.Sprint("w", i)
	}
	for _, tc := range []struct {
		name  string
		words []string
		a     Action
		repl  string
		want  string
	}{
		{"w", nil, Mask, "", "no words"},
		{"w", []string{"a", " \t"}, Mask, "", "word 1 is empty"},
		{"w", many, Mask, "", "10001 words, more than 10000"},
		{"w", []string{strings.Repeat("a", maxWordBytes+1)}, Mask, "", "more than 65536 bytes"},
		{"w", []string{"a\xff"}, Mask, "", "word 0 is not valid UTF-8"},
		{"", []string{"a"}, Mask, "", "no name"},
		{"w", []string{"a"}, Flag, "x", "only for mask rules"},
		{"w", []string{"a"}, 9, "", "action Action(9)"},
	} {
		_, err := WordRules(tc.name, tc.words, tc.a, tc.repl)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidRule) {
			t.Errorf("WordRules(%q, %.3q): %v; want %q", tc.name, tc.words, err, tc.want)
		}
	}
	// The largest list allowed compiles and matches its last entry.
	r, err := WordRules("big", many[:maxWords], Flag, "")
	if err != nil {
		t.Fatal(err)
	}
	set := mustCompile(t, Options{}, r)
	if _, evs, _, _ := filterChunks(set, chunk("say W9999 now, not w99999", 3)); len(evs) != 1 || evs[0].Start != 4 {
		t.Fatalf("events %v; want W9999 alone", evs)
	}
}

func TestParseAction(t *testing.T) {
	t.Parallel()
	for _, a := range []Action{Mask, Stop, Flag} {
		if got, err := ParseAction(a.String()); got != a || err != nil {
			t.Errorf("ParseAction(%q) = %v, %v", a.String(), got, err)
		}
	}
	if _, err := ParseAction("drop"); err == nil || !strings.Contains(err.Error(), `"drop"`) {
		t.Errorf("ParseAction(drop): %v", err)
	}
}

// One Set serves many streams at once (run with -race).
func TestSetConcurrentStreams(t *testing.T) {
	t.Parallel()
	set := mustCompile(t, Options{}, email, phone)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			text := fmt.Sprintf("user%d@example.com called 555-000-%04d", g, g)
			out, _, _, err := filterChunks(set, chunk(text, g+1))
			if err == nil && out != "[email] called [phone]" {
				err = fmt.Errorf("stream %d: %q", g, out)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if s := set.Stats(); s.Streams != 8 || s.Matches != 16 {
		t.Errorf("stats %+v; want 8 streams, 16 matches", s)
	}
}
