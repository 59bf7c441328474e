package streamfilter

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// filterWhole is the reference the streams are held to: it filters a whole
// text at once, with the same choice of matches, using package regexp on
// the whole text (so every assertion sees its true context). It finds a
// rule's next match at or after byte p by skipping the runes before p in
// the pattern itself, so it needs texts under 1,000 runes.
func filterWhole(rules []Rule, text string) (out string, events []Event, stop bool) {
	type cand struct {
		start, end int
		found      bool
	}
	find := func(r Rule, from int) cand {
		for {
			skip := utf8.RuneCountInString(text[:from])
			re := regexp.MustCompile(`\A(?s:.){` + strconv.Itoa(skip) + `}(?s:.)*?(` + r.Pattern + `)`)
			loc := re.FindStringSubmatchIndex(text)
			if loc == nil {
				return cand{}
			}
			if r.Validate == nil || r.Validate(text[loc[2]:loc[3]]) {
				return cand{loc[2], loc[3], true}
			}
			_, w := utf8.DecodeRuneInString(text[loc[2]:])
			from = loc[2] + w
		}
	}
	var b strings.Builder
	cur := 0
	for {
		best, bc := -1, cand{}
		for i, r := range rules {
			c := find(r, cur)
			if c.found && (best < 0 || c.start < bc.start || c.start == bc.start && c.end > bc.end) {
				best, bc = i, c
			}
		}
		if best < 0 {
			break
		}
		r := rules[best]
		events = append(events, Event{Rule: r.Name, Action: r.Action, Start: int64(bc.start), End: int64(bc.end)})
		b.WriteString(text[cur:bc.start])
		switch {
		case r.Action == Stop:
			return b.String(), events, true
		case r.Action == Flag:
			b.WriteString(text[bc.start:bc.end])
		case r.ReplaceFunc != nil:
			b.WriteString(r.ReplaceFunc(text[bc.start:bc.end]))
		default:
			b.WriteString(r.Replace)
		}
		cur = bc.end
	}
	b.WriteString(text[cur:])
	return b.String(), events, false
}

// filterChunks writes chunks to a stream of set and flushes it, joining
// what it releases.
func filterChunks(set *Set, chunks []string) (out string, events []Event, stop bool, err error) {
	st := set.Stream()
	var b strings.Builder
	for _, c := range chunks {
		o, ev, s, err := st.Write(c)
		if err != nil {
			return "", nil, false, err
		}
		b.WriteString(o)
		events = append(events, ev...)
		if s {
			return b.String(), events, true, nil
		}
	}
	o, ev, s := st.Flush()
	b.WriteString(o)
	return b.String(), append(events, ev...), s, nil
}

// luhn reports whether the digits of s pass the Luhn check.
func luhn(s string) bool {
	sum, double := 0, false
	for i := len(s) - 1; i >= 0; i-- {
		d := int(s[i] - '0')
		if d < 0 || d > 9 {
			return false
		}
		if double {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

// fuzzRules is the fixed list FuzzStream picks subsets of: PII-like
// patterns, a word list, every action, assertions of both kinds, a
// validator, a computed replacement, a lazy repeat, non-ASCII.
func fuzzRules() []Rule {
	words, err := WordRules("words", []string{"ass", "new york", "new york city", "c++"}, Mask, "***")
	if err != nil {
		panic(err)
	}
	return []Rule{
		{Name: "email", Pattern: `[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}`, Action: Mask, Replace: "[email]"},
		{Name: "phone", Pattern: `\+?\d{3}[-. ]\d{3}[-. ]\d{4}`, Action: Mask, Replace: "[phone]"},
		words,
		{Name: "card", Pattern: `\b\d{8,16}\b`, Validate: luhn, Action: Mask, Replace: "[card]"},
		{Name: "stop", Pattern: `(?i)forbidden`, Action: Stop},
		{Name: "heading", Pattern: `(?m)^#+`, Action: Flag},
		{Name: "ing", Pattern: `\Bing\b`, Action: Mask, Replace: "ING"},
		{Name: "end", Pattern: `end$`, Action: Mask, Replace: "END"},
		{Name: "eacute", Pattern: `é+|日本`, Action: Mask, Replace: "E"},
		{Name: "lazy", Pattern: `<.*?>`, Action: Mask, Replace: "<>"},
		{Name: "first", Pattern: `\Aany`, Action: Flag},
		{Name: "xyz", Pattern: `x(?:yz)?`, Action: Mask, ReplaceFunc: func(m string) string { return fmt.Sprintf("{%d}", len(m)) }},
		{Name: "multi-end", Pattern: `(?m)\d$`, Action: Mask, Replace: "D"},
	}
}
