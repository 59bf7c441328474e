package jsonfmt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/semaq/semaq/internal/schema"
)

// jsonPayloadSmallObject is how many keys an object may have before the
// duplicate check switches from comparing against the earlier keys to a
// map: below it nothing is allocated.
const jsonPayloadSmallObject = 16

// jsonKeySpan is one object key as written in the payload: the bytes
// between its quotes. A key with escapes or invalid UTF-8 also carries its
// decoded value, the one the decoder (and so the validator) sees.
type jsonKeySpan struct {
	start, end int
	dec        string
	decoded    bool
}

func (k *jsonKeySpan) str(data []byte) string {
	if k.decoded {
		return k.dec
	}
	return string(data[k.start:k.end])
}

// jsonPayloadFrame is one open container of the scan.
type jsonPayloadFrame struct {
	obj   bool
	first int                 // objects: index of its first key in the shared key slice
	big   map[string]struct{} // objects past jsonPayloadSmallObject keys
	index int                 // arrays: the current element
}

// jsonScanPayload checks a payload the decoder has already accepted as
// one JSON document, in one pass over its bytes: number literals within
// l (before the validator turns any into a big.Rat: 1e999999 costs
// seconds), and no object with a key twice. encoding/json keeps the last
// of two equal keys, a consumer in another language may keep the first,
// so a payload with a duplicate would be "validated" on a value others
// do not read. Keys are compared as decoded ("a" and "\u0061" are the
// same key); keys differing only in case are different data and are
// kept. It returns the number of values, which sizes the validation
// budget.
func jsonScanPayload(data []byte, l schema.Limits) (values int, verr *schema.ValidationError) {
	var frameBuf [16]jsonPayloadFrame
	var keyBuf [32]jsonKeySpan
	stack, keys := frameBuf[:0], keyBuf[:0]
	// path is the JSON pointer of the current position: every open
	// container's current member, then extra (a key being added).
	path := func(extra *jsonKeySpan) string {
		var sb strings.Builder
		for i, f := range stack {
			if !f.obj {
				sb.WriteByte('/')
				sb.WriteString(strconv.Itoa(f.index))
				continue
			}
			if extra != nil && i == len(stack)-1 {
				break // extra is the member being added to this object
			}
			// The object's keys run up to the first key of the next open
			// object; its current member is the last of them.
			end := len(keys)
			for _, g := range stack[i+1:] {
				if g.obj {
					end = g.first
					break
				}
			}
			if end > f.first {
				sb.WriteByte('/')
				sb.WriteString(schema.EscapeToken(keys[end-1].str(data)))
			}
		}
		if extra != nil {
			sb.WriteByte('/')
			sb.WriteString(schema.EscapeToken(extra.str(data)))
		}
		return sb.String()
	}
	advance := func() {
		if n := len(stack); n > 0 && !stack[n-1].obj {
			stack[n-1].index++
		}
	}
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',' || c == ':':
			i++
		case c == '{' || c == '[':
			values++
			stack = append(stack, jsonPayloadFrame{obj: c == '{', first: len(keys)})
			i++
		case c == '}' || c == ']':
			if n := len(stack); n > 0 {
				if stack[n-1].obj {
					keys = keys[:stack[n-1].first]
				}
				stack = stack[:n-1]
			}
			advance()
			i++
		case c == '"':
			start, esc, high := i+1, false, false
			j := start
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					esc = true
					j++
				} else if data[j] >= utf8.RuneSelf {
					high = true
				}
				j++
			}
			if j >= len(data) {
				return values, nil // cannot happen on decoded input
			}
			i = j + 1
			n := len(stack)
			if n == 0 || !stack[n-1].obj || !jsonIsKey(data, i) {
				values++
				advance()
				continue
			}
			k := jsonKeySpan{start: start, end: j}
			// Invalid UTF-8 is decoded to U+FFFD: compare what the
			// validator sees.
			if esc || (high && !utf8.Valid(data[start:j])) {
				var dec string // its own variable: only this branch allocates
				if err := json.Unmarshal(data[start-1:j+1], &dec); err == nil {
					k.dec, k.decoded = dec, true
				}
			}
			f := &stack[n-1]
			if prev := jsonFindKey(data, keys[f.first:], f, &k); prev {
				p := path(&k)
				return values, &schema.ValidationError{Path: p, Rule: "duplicateKey",
					Message: fmt.Sprintf("duplicate key %q: the object has it twice, and readers disagree on which value counts", k.str(data))}
			}
			keys = append(keys, k)
		default: // number, true, false, null
			j := i
			for j < len(data) && !jsonIsDelim(data[j]) {
				j++
			}
			lit := data[i:j]
			if len(lit) > 0 && (lit[0] == '-' || (lit[0] >= '0' && lit[0] <= '9')) &&
				(len(lit) > l.MaxNumberLength || bytes.ContainsAny(lit, "eE")) {
				if lerr := schema.NumberLiteralProblem(string(lit), l); lerr != nil {
					return values, &schema.ValidationError{Path: path(nil), Rule: lerr.Limit, Message: lerr.Message + ": refused before validation"}
				}
			}
			values++
			advance()
			if j == i {
				j++ // a byte no valid document has here; never loop
			}
			i = j
		}
	}
	return values, nil
}

// jsonIsKey reports whether the string that ended before i is an object
// key: the next byte that is not space is a colon.
func jsonIsKey(data []byte, i int) bool {
	for ; i < len(data); i++ {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			continue
		case ':':
			return true
		}
		return false
	}
	return false
}

func jsonIsDelim(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', ',', ':', ']', '}', '[', '{', '"':
		return true
	}
	return false
}

// jsonFindKey reports whether k is among the earlier keys of the object
// f, and records it. Small objects compare against earlier keys in place;
// from jsonPayloadSmallObject keys on, a map holds them.
func jsonFindKey(data []byte, earlier []jsonKeySpan, f *jsonPayloadFrame, k *jsonKeySpan) bool {
	if f.big != nil {
		s := k.str(data)
		if _, dup := f.big[s]; dup {
			return true
		}
		f.big[s] = struct{}{}
		return false
	}
	kb := data[k.start:k.end]
	for i := range earlier {
		e := &earlier[i]
		if !e.decoded && !k.decoded {
			if bytes.Equal(data[e.start:e.end], kb) {
				return true
			}
		} else if e.str(data) == k.str(data) {
			return true
		}
	}
	if len(earlier)+1 >= jsonPayloadSmallObject {
		f.big = make(map[string]struct{}, 2*jsonPayloadSmallObject)
		for i := range earlier {
			f.big[earlier[i].str(data)] = struct{}{}
		}
		f.big[k.str(data)] = struct{}{}
	}
	return false
}
