package pii

import "strings"

// MaxPlaceholderNumber bounds the number in a placeholder FindPlaceholders recognises (nine digits).
const MaxPlaceholderNumber = 999999999

// MaxPlaceholderLen is the length of the longest placeholder FindPlaceholders recognises, "<SECRET_999999999>":
// a stream restorer holds back that much of a chunk's tail that could be the start of one.
const MaxPlaceholderLen = len("<SECRET_999999999>")

// FindPlaceholders finds every placeholder of the form Placeholder writes, "<TYPE_N>" with a known type and N
// from 1 to MaxPlaceholderNumber without leading zeros, in text. The findings are in order and do not overlap;
// text[f.Start:f.End] is the placeholder.
func FindPlaceholders(text string) []Finding {
	var out []Finding
	for i := 0; i < len(text); {
		k := strings.IndexByte(text[i:], '<')
		if k < 0 {
			break
		}
		start := i + k
		if t, end, ok := placeholderAt(text, start); ok {
			out = append(out, Finding{Type: t, Start: start, End: end})
			i = end
			continue
		}
		i = start + 1
	}
	return out
}

// placeholderAt reads a placeholder at text[start], which is '<'.
func placeholderAt(text string, start int) (Type, int, bool) {
	rest := text[start+1:]
	for _, t := range allTypes {
		u := t.upper()
		if len(rest) < len(u)+3 || rest[:len(u)] != u || rest[len(u)] != '_' {
			continue
		}
		j := len(u) + 1
		d := j
		for j < len(rest) && isDigit(rest[j]) && j-d < 9 {
			j++
		}
		if j == d || rest[d] == '0' || j >= len(rest) || rest[j] != '>' {
			continue
		}
		return t, start + 1 + j + 1, true
	}
	return "", 0, false
}

// Restore replaces each placeholder in text for which lookup returns a value with that value, and leaves the
// others as they are. It returns text itself when it replaces nothing.
func Restore(text string, lookup func(placeholder string) (string, bool)) string {
	if strings.IndexByte(text, '<') < 0 {
		return text
	}
	var b strings.Builder
	prev := 0
	for _, f := range FindPlaceholders(text) {
		v, ok := lookup(text[f.Start:f.End])
		if !ok {
			continue
		}
		if b.Len() == 0 {
			b.Grow(len(text))
		}
		b.WriteString(text[prev:f.Start])
		b.WriteString(v)
		prev = f.End
	}
	if prev == 0 {
		return text
	}
	b.WriteString(text[prev:])
	return b.String()
}
