package jsonfmt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"sync"
	"unicode/utf8"

	"github.com/semaq/semaq/internal/schema"
)

// The byte path. Decoding a payload into map[string]any was most of the
// cost of schema-on-write (one map, string and json.Number per value), so
// Validate first reads the payload once into a tape: a flat list of
// tokens that point into the payload's bytes, reused between calls. The
// compiled schema (jsonFast) is then checked against the tape
// (fastpath_check.go): keys are looked up and strings compared in place,
// numbers parsed only where a keyword needs them.
//
// The tape is only ever a shortcut to "valid". Anything it does not
// accept — malformed JSON, a duplicate key, a number past the limits, a
// payload nested deeper than MaxDepth or a verdict other than valid —
// sends the payload down the decoding path, which decides and words the
// error exactly as before. A payload is therefore accepted by the byte
// path only if the decoding path would accept it too; the fuzz targets
// compare both with the library.

// Token kinds.
const (
	jsonTokNull uint8 = iota
	jsonTokFalse
	jsonTokTrue
	jsonTokNumber
	jsonTokString
	jsonTokArray
	jsonTokObject
)

// Token flags.
const (
	// jsonTokDecode: a string with escapes or invalid UTF-8, whose value
	// (what the decoder yields) differs from its bytes.
	jsonTokDecode uint8 = 1 << iota
	// jsonTokASCII: a string of ASCII bytes without escapes: its length
	// in characters is its length in bytes.
	jsonTokASCII
	// jsonTokFraction: a number written with '.', 'e' or 'E'.
	jsonTokFraction
)

// jsonTok is one value of the tape, or one object key. An object's
// members follow it as key, value, key, value...; an array's elements
// follow it in order.
type jsonTok struct {
	// start, end: a string's bytes between its quotes, a number's
	// literal; for containers, the opening bracket and the byte after the
	// closing one.
	start, end int32
	// next is the index of the token after this value and all it holds.
	next int32
	// n counts an array's elements, an object's members.
	n           int32
	kind, flags uint8
}

// jsonTape is one payload read into tokens. Not safe for concurrent use;
// Validate takes one from jsonTapePool for each call.
type jsonTape struct {
	data     []byte
	toks     []jsonTok
	values   int // JSON values, keys excluded: sizes the step budget
	maxDepth int
	limits   schema.Limits
}

// jsonTapeMaxPooled bounds the tokens of a tape kept for reuse (24 bytes
// each, so 384 KiB): a tape grown by a large payload is left to the
// garbage collector.
const jsonTapeMaxPooled = 1 << 14

var jsonTapePool = sync.Pool{New: func() any { return new(jsonTape) }}

func jsonGetTape() *jsonTape { return jsonTapePool.Get().(*jsonTape) }

func jsonPutTape(t *jsonTape) {
	if cap(t.toks) > jsonTapeMaxPooled {
		return
	}
	t.data, t.toks = nil, t.toks[:0]
	jsonTapePool.Put(t)
}

// read tokenizes data, one JSON document, within l (with defaults). It
// reports false for anything the decoding path must look at: malformed
// JSON as encoding/json defines it (RFC 8259; invalid UTF-8 inside strings
// is accepted and read as U+FFFD, as the decoder does), a duplicate key
// (compared as decoded), a number literal past MaxNumberLength or
// MaxNumberExponent, nesting deeper than MaxDepth.
func (t *jsonTape) read(data []byte, l schema.Limits) bool {
	if len(data) > math.MaxInt32-1 {
		return false
	}
	t.data, t.toks, t.values, t.limits = data, t.toks[:0], 0, l
	t.maxDepth = l.MaxDepth
	i, ok := t.value(jsonSkipSpace(data, 0), 0)
	return ok && jsonSkipSpace(data, i) == len(data)
}

func jsonSkipSpace(d []byte, i int) int {
	for i < len(d) {
		switch d[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// value reads the value at d[i:] and returns the index after it.
func (t *jsonTape) value(i, depth int) (int, bool) {
	d := t.data
	if i >= len(d) {
		return i, false
	}
	t.values++
	switch c := d[i]; c {
	case '{', '[':
		if depth >= t.maxDepth {
			return i, false
		}
		if c == '{' {
			return t.object(i, depth)
		}
		return t.array(i, depth)
	case '"':
		return t.str(i)
	case 't':
		return t.literal(i, "true", jsonTokTrue)
	case 'f':
		return t.literal(i, "false", jsonTokFalse)
	case 'n':
		return t.literal(i, "null", jsonTokNull)
	}
	return t.number(i)
}

func (t *jsonTape) literal(i int, word string, kind uint8) (int, bool) {
	end := i + len(word)
	if end > len(t.data) || string(t.data[i:end]) != word {
		return i, false
	}
	n := int32(len(t.toks))
	t.toks = append(t.toks, jsonTok{start: int32(i), end: int32(end), next: n + 1, kind: kind})
	return end, true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (t *jsonTape) number(i int) (int, bool) {
	d := t.data
	j := i
	if j < len(d) && d[j] == '-' {
		j++
	}
	switch {
	case j < len(d) && d[j] == '0':
		j++
	case j < len(d) && d[j] >= '1' && d[j] <= '9':
		for j++; j < len(d) && d[j] >= '0' && d[j] <= '9'; j++ {
		}
	default:
		return i, false
	}
	var flags uint8
	if j < len(d) && d[j] == '.' {
		flags = jsonTokFraction
		j++
		k := j
		for ; j < len(d) && d[j] >= '0' && d[j] <= '9'; j++ {
		}
		if j == k {
			return i, false
		}
	}
	exp := false
	if j < len(d) && (d[j] == 'e' || d[j] == 'E') {
		flags, exp = jsonTokFraction, true
		j++
		if j < len(d) && (d[j] == '+' || d[j] == '-') {
			j++
		}
		k := j
		for ; j < len(d) && d[j] >= '0' && d[j] <= '9'; j++ {
		}
		if j == k {
			return i, false
		}
	}
	// The checks of the decoding path's scan, on the same condition.
	if exp || j-i > t.limits.MaxNumberLength {
		if schema.NumberLiteralProblem(string(d[i:j]), t.limits) != nil {
			return i, false
		}
	}
	n := int32(len(t.toks))
	t.toks = append(t.toks, jsonTok{start: int32(i), end: int32(j), next: n + 1, kind: jsonTokNumber, flags: flags})
	return j, true
}

// str reads the string whose opening quote is d[i].
func (t *jsonTape) str(i int) (int, bool) {
	d := t.data
	j := i + 1
	escaped, high := false, false
	for {
		// Skip 8 plain bytes at a time: most of a payload is the text of
		// strings.
		for j+8 <= len(d) && !jsonSpecial8(binary.LittleEndian.Uint64(d[j:])) {
			j += 8
		}
		if j >= len(d) {
			return i, false
		}
		c := d[j]
		if c == '"' {
			break
		}
		switch {
		case c < 0x20:
			return i, false
		case c == '\\':
			escaped = true
			if j+1 >= len(d) {
				return i, false
			}
			switch d[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(d) || !jsonIsHex4(d[j+2:j+6]) {
					return i, false
				}
				j += 6
			default:
				return i, false
			}
			continue
		case c >= utf8.RuneSelf:
			high = true
		}
		j++
	}
	var flags uint8
	switch {
	case escaped || (high && !utf8.Valid(d[i+1:j])):
		flags = jsonTokDecode
	case !high:
		flags = jsonTokASCII
	}
	n := int32(len(t.toks))
	t.toks = append(t.toks, jsonTok{start: int32(i + 1), end: int32(j), next: n + 1, kind: jsonTokString, flags: flags})
	return j + 1, true
}

// jsonSpecial8 reports whether one of the 8 bytes in x may need a look
// inside a string: a quote, a backslash, a control byte or a non-ASCII
// byte. (A false positive only costs the byte loop.)
func jsonSpecial8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := x ^ (ones * '"')
	backslash := x ^ (ones * '\\')
	return ((quote-ones)&^quote|(backslash-ones)&^backslash|(x-ones*0x20)|x)&highs != 0
}

func jsonIsHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func (t *jsonTape) array(i, depth int) (int, bool) {
	d := t.data
	at := len(t.toks)
	t.toks = append(t.toks, jsonTok{start: int32(i), kind: jsonTokArray})
	i = jsonSkipSpace(d, i+1)
	var n int32
	if i < len(d) && d[i] == ']' {
		i++
	} else {
		for {
			var ok bool
			if i, ok = t.value(i, depth+1); !ok {
				return i, false
			}
			n++
			var done bool
			if i, done, ok = t.next(i, ']'); !ok {
				return i, false
			}
			if done {
				break
			}
		}
	}
	tok := &t.toks[at]
	tok.end, tok.next, tok.n = int32(i), int32(len(t.toks)), n
	return i, true
}

func (t *jsonTape) object(i, depth int) (int, bool) {
	d := t.data
	at := len(t.toks)
	t.toks = append(t.toks, jsonTok{start: int32(i), kind: jsonTokObject})
	i = jsonSkipSpace(d, i+1)
	var n int32
	var big map[string]struct{}
	if i < len(d) && d[i] == '}' {
		i++
	} else {
		for {
			if i >= len(d) || d[i] != '"' {
				return i, false
			}
			key := len(t.toks)
			var ok bool
			if i, ok = t.str(i); !ok {
				return i, false
			}
			if big, ok = t.newKey(at, key, n, big); !ok {
				return i, false
			}
			i = jsonSkipSpace(d, i)
			if i >= len(d) || d[i] != ':' {
				return i, false
			}
			if i, ok = t.value(jsonSkipSpace(d, i+1), depth+1); !ok {
				return i, false
			}
			n++
			var done bool
			if i, done, ok = t.next(i, '}'); !ok {
				return i, false
			}
			if done {
				break
			}
		}
	}
	tok := &t.toks[at]
	tok.end, tok.next, tok.n = int32(i), int32(len(t.toks)), n
	return i, true
}

// next reads what follows a member of an array or object: its closing
// byte (done) or a comma and the space after it; ok is false for
// anything else.
func (t *jsonTape) next(i int, closing byte) (_ int, done, ok bool) {
	d := t.data
	i = jsonSkipSpace(d, i)
	switch {
	case i >= len(d):
		return i, false, false
	case d[i] == closing:
		return i + 1, true, true
	case d[i] != ',':
		return i, false, false
	}
	return jsonSkipSpace(d, i+1), false, true
}

// newKey reports false when the key at token index key repeats one of the
// n earlier keys of the object at token index obj. Small objects compare
// in place; from jsonPayloadSmallObject keys on, big holds the keys.
func (t *jsonTape) newKey(obj, key int, n int32, big map[string]struct{}) (map[string]struct{}, bool) {
	if big != nil {
		s := t.text(int32(key))
		if _, dup := big[s]; dup {
			return big, false
		}
		big[s] = struct{}{}
		return big, true
	}
	for m, at := int32(0), int32(obj+1); m < n; m++ {
		if t.sameString(at, int32(key)) {
			return nil, false
		}
		at = t.toks[at+1].next
	}
	if n+1 >= jsonPayloadSmallObject {
		big = make(map[string]struct{}, 2*jsonPayloadSmallObject)
		for m, at := int32(0), int32(obj+1); m < n; m++ {
			big[t.text(at)] = struct{}{}
			at = t.toks[at+1].next
		}
		big[t.text(int32(key))] = struct{}{}
	}
	return big, true
}

// raw is a token's bytes: a string's between its quotes.
func (t *jsonTape) raw(i int32) []byte {
	k := &t.toks[i]
	return t.data[k.start:k.end]
}

// text is a string token's value as the decoder yields it.
func (t *jsonTape) text(i int32) string {
	k := &t.toks[i]
	if k.flags&jsonTokDecode == 0 {
		return string(t.data[k.start:k.end])
	}
	var s string
	if err := json.Unmarshal(t.data[k.start-1:k.end+1], &s); err != nil {
		return string(t.data[k.start:k.end]) // cannot happen: read checked it
	}
	return s
}

// sameString reports whether string tokens a and b have the same value.
func (t *jsonTape) sameString(a, b int32) bool {
	if (t.toks[a].flags|t.toks[b].flags)&jsonTokDecode == 0 {
		return bytes.Equal(t.raw(a), t.raw(b))
	}
	return t.text(a) == t.text(b)
}

// equalsString reports whether string token i has the value s.
func (t *jsonTape) equalsString(i int32, s string) bool {
	if t.toks[i].flags&jsonTokDecode == 0 {
		return string(t.raw(i)) == s
	}
	return t.text(i) == s
}

// any is the value at token i as the decoding path has it (numbers as
// json.Number), for the rare keywords that need a Go value (format,
// propertyNames).
func (t *jsonTape) any(i int32) any {
	k := &t.toks[i]
	switch k.kind {
	case jsonTokNull:
		return nil
	case jsonTokFalse:
		return false
	case jsonTokTrue:
		return true
	case jsonTokNumber:
		return json.Number(t.raw(i))
	case jsonTokString:
		return t.text(i)
	}
	v, err := jsonDecode(t.data[k.start:k.end])
	if err != nil {
		return nil // cannot happen: read checked it
	}
	return v
}
