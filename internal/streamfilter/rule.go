package streamfilter

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Action is what a rule does to the text it matches.
type Action uint8

const (
	// Mask replaces the match by Rule.Replace (or Rule.ReplaceFunc's result).
	Mask Action = iota + 1
	// Stop ends the stream: the text before the match is released, the match
	// and everything after it are not.
	Stop
	// Flag keeps the text and reports the match as an Event.
	Flag
)

// The zero Action is invalid, so a Rule that forgot its action is refused
// rather than silently masking.
var actionNames = [...]string{Mask: "mask", Stop: "stop", Flag: "flag"}

func (a Action) String() string {
	if a >= Mask && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

func (a Action) valid() bool { return a >= Mask && a <= Flag }

// ParseAction returns the Action named "mask", "stop" or "flag".
func ParseAction(s string) (Action, error) {
	for a, n := range actionNames {
		if n != "" && n == s {
			return Action(a), nil
		}
	}
	return 0, fmt.Errorf("streamfilter: unknown action %q (want mask, stop or flag)", s)
}

// Rule is one pattern to look for in a stream and what to do with a match.
type Rule struct {
	Name    string // reported in events; unique within a Set
	Pattern string // RE2 syntax, as package regexp; must not match the empty string
	// Validate, when set, decides whether a match counts: a match it refuses
	// is no match (the rule looks again from the next character).
	Validate func(string) bool
	Action   Action
	// Replace is the text a Mask rule puts in place of its match; empty
	// deletes the match. ReplaceFunc, when set, computes it instead.
	Replace     string
	ReplaceFunc func(match string) string
}

// Bounds on what a rule may carry.
const (
	maxPatternBytes = 256 << 10
	maxNameBytes    = 256
	// WordRules' bounds.
	maxWords     = 10000
	maxWordBytes = 64 << 10
)

// checkShape validates everything about r but its pattern's syntax.
func (r *Rule) checkShape() error {
	switch {
	case r.Name == "":
		return errors.New("no name")
	case len(r.Name) > maxNameBytes:
		return fmt.Errorf("name longer than %d bytes", maxNameBytes)
	case !r.Action.valid():
		return fmt.Errorf("action %v is not mask, stop or flag", r.Action)
	case r.Action != Mask && (r.Replace != "" || r.ReplaceFunc != nil):
		return fmt.Errorf("a replacement is only for mask rules, not %v", r.Action)
	case r.Pattern == "":
		return errors.New("empty pattern")
	case len(r.Pattern) > maxPatternBytes:
		return fmt.Errorf("pattern of %d bytes, more than %d", len(r.Pattern), maxPatternBytes)
	}
	return nil
}

// WordRules makes one rule that matches any of words, case-insensitively and
// as whole words: "ass" does not match inside "class". An entry may be a
// phrase; its spaces match any run of white space. Entries are literal text
// (no pattern syntax), at most 10,000 of them and 64 KiB in total. Where
// several entries match at one place the longest wins.
//
// Word boundaries are those of RE2's \b, which knows only ASCII letters,
// digits and underscore: an edge of an entry that is not one of those (as in
// "c++" or "café") is not held to a boundary.
func WordRules(name string, words []string, a Action, replace string) (Rule, error) {
	r := Rule{Name: name, Action: a, Replace: replace, Pattern: "x"}
	fail := func(err error) (Rule, error) { return Rule{}, &RuleError{Index: -1, Name: name, Err: err} }
	if err := r.checkShape(); err != nil {
		return fail(err)
	}
	switch {
	case len(words) == 0:
		return fail(errors.New("no words"))
	case len(words) > maxWords:
		return fail(fmt.Errorf("%d words, more than %d", len(words), maxWords))
	}
	total := 0
	seen := make(map[string]bool, len(words))
	alts := make([]string, 0, len(words))
	for i, w := range words {
		total += len(w)
		if total > maxWordBytes {
			return fail(fmt.Errorf("words of more than %d bytes in total", maxWordBytes))
		}
		fields := strings.Fields(w)
		if len(fields) == 0 {
			return fail(fmt.Errorf("word %d is empty", i))
		}
		if !utf8.ValidString(w) {
			return fail(fmt.Errorf("word %d is not valid UTF-8", i))
		}
		key := strings.ToLower(strings.Join(fields, " "))
		if seen[key] {
			continue
		}
		seen[key] = true
		first, _ := utf8.DecodeRuneInString(fields[0])
		last, _ := utf8.DecodeLastRuneInString(fields[len(fields)-1])
		for j, f := range fields {
			fields[j] = regexp.QuoteMeta(f)
		}
		alt := strings.Join(fields, `\s+`)
		if isWordRune(first) {
			alt = `\b` + alt
		}
		if isWordRune(last) {
			alt += `\b`
		}
		alts = append(alts, alt)
	}
	// Leftmost-first alternation takes the first entry that matches: put
	// longer ones first so "new york city" beats "new york".
	slices.SortStableFunc(alts, func(x, y string) int { return len(y) - len(x) })
	r.Pattern = `(?i:` + strings.Join(alts, "|") + `)`
	if len(r.Pattern) > maxPatternBytes {
		return fail(fmt.Errorf("pattern of %d bytes, more than %d", len(r.Pattern), maxPatternBytes))
	}
	return r, nil
}

func isWordRune(r rune) bool {
	return r < utf8.RuneSelf && (r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
}
