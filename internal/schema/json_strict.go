package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// DuplicateKeyError is a JSON object with one key twice. encoding/json
// keeps the last value silently, and other readers may keep the first, so
// the text would not mean one thing: it is refused wherever SemaQ acts on
// a decoded value (schemas, registry request bodies).
type DuplicateKeyError struct {
	Key string
	// Other is the earlier key when it differs only in case.
	Other string
	// Path is the JSON pointer of the object ("" for the root).
	Path string
}

func (e *DuplicateKeyError) Error() string {
	where := e.Path
	if where == "" {
		where = "/"
	}
	if e.Other != "" && e.Other != e.Key {
		return fmt.Sprintf("duplicate key %q at %s (same as %q but for case)", e.Key, where, e.Other)
	}
	return fmt.Sprintf("duplicate key %q at %s", e.Key, where)
}

// StrictJSON checks a JSON text before it is decoded: nesting within
// l.MaxDepth, at most l.MaxNodes values, number literals within
// l.MaxNumberLength and l.MaxNumberExponent, and no object with a key
// twice (foldCase: nor two keys equal but for case, as encoding/json
// matches struct fields). Zero fields of l take their defaults. Malformed
// JSON is not reported here (nil): the decoder that follows says where.
func StrictJSON(data []byte, l Limits, foldCase bool) error {
	return NewBudget(l).StrictJSON(data, foldCase)
}

type jsonFrame struct {
	obj       bool
	keys      map[string]string // key (folded when foldCase) -> key as written
	expectKey bool
	key       string // the current member's key
	index     int    // arrays: the current element
}

// StrictJSON is the package's StrictJSON charging b, so the node count
// spans a schema and its references.
func (b *Budget) StrictJSON(data []byte, foldCase bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*jsonFrame
	path := func() string {
		var sb strings.Builder
		for _, f := range stack {
			sb.WriteByte('/')
			if f.obj {
				sb.WriteString(EscapeToken(f.key))
			} else {
				sb.WriteString(strconv.Itoa(f.index))
			}
		}
		return sb.String()
	}
	// parentPath is the pointer of the innermost container.
	parentPath := func() string {
		top := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		p := path()
		stack = append(stack, top)
		return p
	}
	advance := func() {
		if len(stack) == 0 {
			return
		}
		top := stack[len(stack)-1]
		if top.obj {
			top.expectKey = true
		} else {
			top.index++
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF or a syntax error, which the decoder reports
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].expectKey {
			top := stack[n-1]
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				advance()
				continue
			}
			k, _ := tok.(string)
			fk := k
			if foldCase {
				fk = strings.ToLower(k)
			}
			if prev, dup := top.keys[fk]; dup {
				return &DuplicateKeyError{Key: k, Other: prev, Path: parentPath()}
			}
			top.keys[fk] = k
			top.key, top.expectKey = k, false
			continue
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			advance()
			continue
		}
		if !b.Node() {
			return &LimitError{Limit: "MaxNodes", Max: b.l.MaxNodes, Where: path(),
				Message: fmt.Sprintf("more than %d JSON values", b.l.MaxNodes)}
		}
		switch t := tok.(type) {
		case json.Number:
			if lerr := NumberLiteralProblem(string(t), b.l); lerr != nil {
				lerr.Where = path()
				return lerr
			}
			advance()
		case json.Delim: // '{' or '['
			if len(stack) >= b.l.MaxDepth {
				return &LimitError{Limit: "MaxDepth", Max: b.l.MaxDepth, Where: path(),
					Message: fmt.Sprintf("nested more than %d levels deep", b.l.MaxDepth)}
			}
			f := &jsonFrame{obj: t == '{', expectKey: t == '{'}
			if f.obj {
				f.keys = make(map[string]string)
			}
			stack = append(stack, f)
		default:
			advance()
		}
	}
}

// NumberLiteralProblem says what is wrong with a JSON number literal, nil
// when it is within l (MaxNumberLength, MaxNumberExponent). It only looks at the characters: nothing is converted.
func NumberLiteralProblem(s string, l Limits) *LimitError {
	if len(s) > l.MaxNumberLength {
		return &LimitError{Limit: "MaxNumberLength", Max: l.MaxNumberLength,
			Message: fmt.Sprintf("number literal %s has %d characters", jsonCut(s), len(s))}
	}
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return nil
	}
	exp := strings.TrimLeft(strings.TrimLeft(s[i+1:], "+-"), "0")
	n, err := strconv.Atoi(exp)
	if exp == "" {
		n, err = 0, nil
	}
	if err != nil || len(exp) > 9 || n > l.MaxNumberExponent {
		return &LimitError{Limit: "MaxNumberExponent", Max: l.MaxNumberExponent,
			Message: fmt.Sprintf("number %s has an exponent beyond ±%d", jsonCut(s), l.MaxNumberExponent)}
	}
	return nil
}

func jsonCut(s string) string {
	if len(s) <= 40 {
		return s
	}
	return s[:37] + "..."
}

// EscapeToken escapes one reference token of an RFC 6901 JSON pointer.
func EscapeToken(t string) string {
	if !strings.ContainsAny(t, "~/") {
		return t
	}
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}
