package pii

import "strings"

// A seeder finds the windows of a text where a detector's pattern may match, so that the regular expression
// runs over a few dozen bytes around each candidate instead of the whole text. Windows are emitted in order and
// may overlap; a match cut short by a window's edge is refused by the detector's context check, which sees the
// whole text.
type seeder func(text string, emit func(lo, hi int))

// digitsSeed emits each cluster of digit runs (joined by at most two of " -.()/") holding at least minDigits digits,
// widened by before and after bytes for a prefix ("+86 ", a keyword) or a suffix (a check 'X').
func digitsSeed(minDigits, before, after int) seeder {
	return func(text string, emit func(lo, hi int)) {
		n := len(text)
		for i := 0; i < n; i++ {
			if !isDigit(text[i]) {
				continue
			}
			start, digits := i, 0
			for {
				for i < n && isDigit(text[i]) {
					i++
					digits++
				}
				j := i
				for j < n && j-i < 2 && strings.IndexByte(" -.()/", text[j]) >= 0 {
					j++
				}
				if j == i || j >= n || !isDigit(text[j]) {
					break
				}
				i = j
			}
			if digits >= minDigits {
				emit(max(0, start-before), min(n, i+after))
			}
		}
	}
}

// ibanSeed emits a window from each pair of capitals followed by two digits.
func ibanSeed(text string, emit func(lo, hi int)) {
	for i := 0; i+4 <= len(text); i++ {
		if isUpper(text[i]) && isUpper(text[i+1]) && isDigit(text[i+2]) && isDigit(text[i+3]) {
			emit(i, min(len(text), i+34+9))
		}
	}
}

// literalSeed emits a window from each occurrence of one of lits that starts a word (or a line of dashes), as
// long as the longest value.
func literalSeed(maxLen int, lits ...string) seeder {
	return func(text string, emit func(lo, hi int)) {
		for i := 0; i < len(text); i++ {
			if i > 0 && isWord(text[i-1]) {
				continue
			}
			for _, l := range lits {
				if strings.HasPrefix(text[i:], l) {
					emit(i, min(len(text), i+maxLen))
					break
				}
			}
		}
	}
}

// ip6Seed emits each run of hex digits, colons and dots holding two colons.
func ip6Seed(text string, emit func(lo, hi int)) {
	n := len(text)
	for i := 0; i < n; i++ {
		c := text[i]
		if !isHex(c) && c != ':' {
			continue
		}
		start, colons := i, 0
		for i < n && (isHex(text[i]) || text[i] == ':' || text[i] == '.') {
			if text[i] == ':' {
				colons++
			}
			i++
		}
		if colons >= 2 {
			emit(start, i)
		}
	}
}

// emailSeed emits, for each '@', the run of address characters around it.
func emailSeed(text string, emit func(lo, hi int)) {
	local := func(c byte) bool { return isAlnum(c) || strings.IndexByte("._%+-", c) >= 0 }
	domain := func(c byte) bool { return isAlnum(c) || c == '.' || c == '-' }
	for i := 0; i < len(text); {
		k := strings.IndexByte(text[i:], '@')
		if k < 0 {
			return
		}
		at := i + k
		lo := at
		for lo > 0 && at-lo < 65 && local(text[lo-1]) {
			lo--
		}
		hi := at + 1
		for hi < len(text) && hi-at < 256 && domain(text[hi]) {
			hi++
		}
		if lo < at && hi > at+1 {
			emit(lo, hi)
		}
		i = at + 1
	}
}

// ssnKeywordSeed emits each run of exactly nine digits that follows "ssn" or "social security" (in any case)
// within 40 bytes.
func ssnKeywordSeed(text string, emit func(lo, hi int)) {
	for i := 0; i < len(text); i++ {
		if !isDigit(text[i]) {
			continue
		}
		start := i
		for i < len(text) && isDigit(text[i]) {
			i++
		}
		if i-start != 9 {
			continue
		}
		lo := max(0, start-40)
		before := text[lo:start]
		if containsFold(before, "ssn") || containsFold(before, "social security") {
			emit(lo, i)
		}
	}
}

// containsFold reports whether s holds the lower-case ASCII word w in any case.
func containsFold(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(w)], w) {
			return true
		}
	}
	return false
}
