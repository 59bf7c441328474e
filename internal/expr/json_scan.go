package expr

import (
	"math/bits"
	"strings"
)

// A minimal, allocation-free JSON scanner over raw text. It finds value
// boundaries so that a lookup reads only the bytes up to the member it wants
// and never builds the values it skips. It is lenient: it does not validate
// what it skips, and on malformed input it reports "not found" or "end"
// rather than guessing. Every index it returns is within bounds or -1.

func skipWS(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string that opens at s[i]
// (which must be '"'), or -1 if it is not terminated. Most JSON strings are
// short: the first 16 bytes are tested eight at a time for a quote or a
// backslash, which is cheaper than starting IndexByte; longer strings are
// left to IndexByte, whose vector loop wins on them.
func skipString(s string, i int) int {
	j := i + 1
	for range 2 {
		if len(s)-j < 8 {
			break
		}
		m := quoteOrBackslash(load64(s[j:]))
		if m == 0 {
			j += 8
			continue
		}
		j += bits.TrailingZeros64(m) >> 3
		if s[j] == '"' {
			return j + 1
		}
		break // an escape: the loop below counts backslashes
	}
	for j < len(s) {
		k := strings.IndexByte(s[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		// The quote is escaped if an odd number of backslashes precede it.
		n := 0
		for b := q - 1; b > i && s[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return -1
}

// load64 reads the first eight bytes of s as a little-endian word (one
// load on amd64 and arm64).
func load64(s string) uint64 {
	s = s[:8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

const (
	lsbs = 0x0101010101010101
	msbs = 0x8080808080808080
)

// quoteOrBackslash has the high bit set in the lowest byte of x that is '"'
// or '\\' (bytes above that one may be false positives; callers use only the
// lowest).
func quoteOrBackslash(x uint64) uint64 {
	q := x ^ (lsbs * '"')
	b := x ^ (lsbs * '\\')
	return ((q-lsbs)&^q | (b-lsbs)&^b) & msbs
}

// skipValue returns the index just past the value that starts at s[i], or
// -1 if the input ends first. i must be < len(s) and not whitespace.
func skipValue(s string, i int) int {
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); {
			switch s[j] {
			case '"':
				j = skipString(s, j)
				if j < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
			j++
		}
		return -1
	default:
		j := i
		for j < len(s) {
			switch s[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j
			}
			j++
		}
		return j
	}
}

// objectIter walks the members of the object raw (which starts with '{').
type objectIter struct {
	s string
	i int
}

// next returns the raw key (quoted, still escaped) and the raw value
// of the next member; ok is false at the end or on malformed input.
func (it *objectIter) next() (key, val string, ok bool) {
	s := it.s
	if it.i < 0 || it.i >= len(s) {
		return "", "", false
	}
	if it.i == 0 {
		it.i = 1 // past '{'
	}
	i := skipWS(s, it.i)
	if i < len(s) && s[i] == ',' {
		i = skipWS(s, i+1)
	}
	if i >= len(s) || s[i] != '"' {
		it.i = -1
		return "", "", false
	}
	ke := skipString(s, i)
	if ke < 0 {
		it.i = -1
		return "", "", false
	}
	key = s[i:ke]
	i = skipWS(s, ke)
	if i >= len(s) || s[i] != ':' {
		it.i = -1
		return "", "", false
	}
	i = skipWS(s, i+1)
	if i >= len(s) {
		it.i = -1
		return "", "", false
	}
	ve := skipValue(s, i)
	if ve < 0 || ve == i {
		it.i = -1
		return "", "", false
	}
	it.i = ve
	return key, s[i:ve], true
}

// arrayIter walks the elements of the array raw (which starts with '[').
type arrayIter struct {
	s string
	i int
}

// next returns the raw text of the next element; ok is false at the end or
// on malformed input.
func (it *arrayIter) next() (val string, ok bool) {
	s := it.s
	if it.i < 0 || it.i >= len(s) {
		return "", false
	}
	if it.i == 0 {
		it.i = 1 // past '['
	}
	i := skipWS(s, it.i)
	if i < len(s) && s[i] == ',' {
		i = skipWS(s, i+1)
	}
	if i >= len(s) || s[i] == ']' || s[i] == '}' {
		it.i = -1
		return "", false
	}
	ve := skipValue(s, i)
	if ve < 0 || ve == i {
		it.i = -1
		return "", false
	}
	it.i = ve
	return s[i:ve], true
}
