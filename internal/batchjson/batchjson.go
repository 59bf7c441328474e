// Package batchjson reads the messages of a batch written as JSON, the form
// the HTTP door (POST /api/v1/publish) and `semaq pub --batch` take
// (docs/batches.md). A message is one object:
//
//	{"subject":"ai.x","headers":{"AI-Model":"m","X-Tag":["a","b"]},"data":{"any":"JSON value"}}
//
// "data" is stored as its JSON text (compacted, so a message reads the same
// whichever way its batch was laid out); "data_base64" (standard base64)
// carries bytes instead; neither is an empty payload. A header's value is a
// string, or an array of strings for a header that repeats.
//
// The envelope is read strictly, as the API reads its bodies
// (httpx.DecodeStrict): unknown keys, keys twice or in another case, and a
// header given twice are refused, so every door reads a message the same
// way. "data" is the payload: any JSON value, as the body of a single
// publish would be, whose schema (if its stream has one) the ingress
// checks. Whether a subject or a header is one the broker accepts is not
// judged here: the doors and the ingress do that per message.
package batchjson

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/semaq/semaq/semaq"
)

// Parse reads one message. Its Header is nil when it has none; Data never
// aliases b. One pass over the envelope's keys and headers, which are read
// strictly; "data" is compacted, which also checks it is JSON.
func Parse(b []byte) (semaq.BatchMsg, error) {
	if !utf8.Valid(b) {
		return semaq.BatchMsg{}, errors.New("not valid UTF-8")
	}
	l := lexer{b: b}
	l.space()
	if !l.next('{') {
		return semaq.BatchMsg{}, errors.New(`want a JSON object {"subject":...,"headers":{...},"data":...}`)
	}
	var (
		m                  semaq.BatchMsg
		seen               [4]bool // subject, headers, data, data_base64
		data, dataBase64   []byte
		hasData, hasBase64 bool
	)
	err := l.members(func(key string) error {
		i := slices.Index(itemKeys[:], key)
		if i < 0 {
			for _, k := range itemKeys {
				if strings.EqualFold(k, key) {
					if seen[slices.Index(itemKeys[:], k)] {
						return fmt.Errorf("keys %q and %q differ only in case", k, key)
					}
					return fmt.Errorf("key %q must be spelled %q (keys are case-sensitive)", key, k)
				}
			}
			return fmt.Errorf("unknown key %q", key)
		}
		if seen[i] {
			return fmt.Errorf("key %q appears twice", key)
		}
		seen[i] = true
		var err error
		switch i {
		case 0:
			if m.Subject, err = l.str(); err != nil {
				return fmt.Errorf(`"subject": %w`, err)
			}
		case 1:
			if m.Header, err = l.headers(); err != nil {
				return err
			}
		case 2:
			data, hasData = l.value(), true
		case 3:
			dataBase64, hasBase64 = l.value(), true
		}
		return nil
	})
	if err != nil {
		return semaq.BatchMsg{}, err
	}
	if l.space(); l.i < len(l.b) {
		return semaq.BatchMsg{}, errors.New("data after the JSON value")
	}
	if m.Subject == "" {
		return semaq.BatchMsg{}, errors.New(`no "subject"`)
	}
	switch {
	case hasData && hasBase64:
		return semaq.BatchMsg{}, errors.New(`both "data" and "data_base64"; give one`)
	case hasData:
		c := bytes.NewBuffer(make([]byte, 0, len(data)))
		if err := json.Compact(c, data); err != nil {
			return semaq.BatchMsg{}, fmt.Errorf(`"data": not valid JSON: %w`, err)
		}
		m.Data = c.Bytes()
	case hasBase64:
		sl := lexer{b: dataBase64}
		s, err := sl.str()
		if err != nil || sl.i != len(sl.b) {
			return semaq.BatchMsg{}, errors.New(`"data_base64" is not a JSON string`)
		}
		d, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return semaq.BatchMsg{}, fmt.Errorf(`"data_base64" is not standard base64: %w`, err)
		}
		m.Data = d
	}
	return m, nil
}

// itemKeys are the keys of a message object, in the order Parse numbers
// them.
var itemKeys = [4]string{"subject", "headers", "data", "data_base64"}

// lexer reads the envelope of a message: objects, their keys, strings, and
// the extent of any other value. It checks what it reads; a value it only
// spans ("data") is checked by whoever reads it.
type lexer struct {
	b []byte
	i int
}

var errSyntax = errors.New("not valid JSON")

func (l *lexer) space() {
	for l.i < len(l.b) {
		switch l.b[l.i] {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return
		}
	}
}

// next consumes c, after white space, if it is next.
func (l *lexer) next(c byte) bool {
	l.space()
	if l.i < len(l.b) && l.b[l.i] == c {
		l.i++
		return true
	}
	return false
}

// members reads the members of an object whose '{' was read, calling fn
// with each key, positioned at its value, which fn must read.
func (l *lexer) members(fn func(key string) error) error {
	if l.next('}') {
		return nil
	}
	for {
		l.space()
		key, err := l.str()
		if err != nil {
			return err
		}
		if !l.next(':') {
			return errSyntax
		}
		l.space()
		if err := fn(key); err != nil {
			return err
		}
		if l.next(',') {
			continue
		}
		if l.next('}') {
			return nil
		}
		return errSyntax
	}
}

// str reads a JSON string.
func (l *lexer) str() (string, error) {
	if l.i >= len(l.b) || l.b[l.i] != '"' {
		return "", errors.New("want a string")
	}
	start, plain := l.i, true
	for j := l.i + 1; j < len(l.b); j++ {
		switch c := l.b[j]; {
		case c == '"':
			l.i = j + 1
			if plain {
				return string(l.b[start+1 : j]), nil
			}
			var s string
			if err := json.Unmarshal(l.b[start:j+1], &s); err != nil {
				return "", errSyntax
			}
			return s, nil
		case c == '\\':
			plain = false
			j++
		case c < 0x20:
			return "", errSyntax
		}
	}
	return "", errSyntax
}

// value spans the JSON value at l.i and returns its bytes, unchecked:
// strings and nesting are followed only to find its end.
func (l *lexer) value() []byte {
	start, depth := l.i, 0
	for l.i < len(l.b) {
		switch c := l.b[l.i]; c {
		case '"':
			if _, err := l.str(); err != nil {
				return l.b[start:] // Compact names the fault
			}
			if depth == 0 {
				return l.b[start:l.i]
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return l.b[start:l.i]
			}
			if depth--; depth == 0 {
				l.i++
				return l.b[start:l.i]
			}
		case ',':
			if depth == 0 {
				return l.b[start:l.i]
			}
		}
		l.i++
	}
	return l.b[start:]
}

// headers reads the headers object: each value a string or a non-empty
// array of strings, no name twice.
func (l *lexer) headers() (map[string][]string, error) {
	if !l.next('{') {
		return nil, errors.New(`"headers": want an object`)
	}
	h := make(map[string][]string)
	err := l.members(func(key string) error {
		if _, ok := h[key]; ok {
			return fmt.Errorf("headers: key %q appears twice", key)
		}
		vs, err := l.headerValues()
		if err != nil {
			return fmt.Errorf("header %q: %w", key, err)
		}
		h[key] = vs
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}

// headerValues reads a header's value: a string, or a non-empty array of
// strings.
func (l *lexer) headerValues() ([]string, error) {
	const want = "want a string or an array of strings"
	if l.i < len(l.b) && l.b[l.i] == '"' {
		s, err := l.str()
		if err != nil {
			return nil, err
		}
		return []string{s}, nil
	}
	if !l.next('[') {
		return nil, errors.New(want)
	}
	if l.next(']') {
		return nil, errors.New("an empty array; leave the header out instead")
	}
	var vs []string
	for {
		l.space()
		s, err := l.str()
		if err != nil {
			return nil, errors.New(want)
		}
		vs = append(vs, s)
		if l.next(',') {
			continue
		}
		if l.next(']') {
			return vs, nil
		}
		return nil, errSyntax
	}
}

// LineError is a message of a batch that does not parse: its line in
// NDJSON, or its place in a JSON array (Line 0).
type LineError struct {
	Line  int // 1-based; 0 in a JSON array
	Index int // the message's index in the batch, 0-based
	Err   error
}

func (e *LineError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("message %d: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("line %d (message %d): %v", e.Line, e.Index, e.Err)
}

func (e *LineError) Unwrap() error { return e.Err }

// ReadLines reads NDJSON from r, one message per line, and calls fn with
// each in order, with its line number (1-based) and index. Blank lines are
// skipped; a line longer than maxLine bytes is an error. It stops at the
// first error, fn's own included, which it returns as it is; errors of
// the input are *LineError.
func ReadLines(r io.Reader, maxLine int, fn func(line, index int, m semaq.BatchMsg) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(maxLine, 64<<10)), maxLine)
	line, index := 0, 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		m, err := Parse(b)
		if err != nil {
			return &LineError{Line: line, Index: index, Err: err}
		}
		if err := fn(line, index, m); err != nil {
			return err
		}
		index++
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &LineError{Line: line + 1, Index: index, Err: fmt.Errorf("longer than %d bytes", maxLine)}
		}
		return err
	}
	return nil
}

// ParseArray reads a JSON array of messages. It stops at the first that
// does not parse (a *LineError), and at max messages, past which it
// returns ErrTooMany.
func ParseArray(b []byte, max int) ([]semaq.BatchMsg, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || d != '[' {
		return nil, errors.New(`want a JSON array of messages [{"subject":...},...]`)
	}
	var msgs []semaq.BatchMsg
	for dec.More() {
		if len(msgs) == max {
			return nil, ErrTooMany
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, &LineError{Index: len(msgs), Err: fmt.Errorf("not valid JSON: %w", err)}
		}
		m, err := Parse(raw)
		if err != nil {
			return nil, &LineError{Index: len(msgs), Err: err}
		}
		msgs = append(msgs, m)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("the array is not closed: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the array")
	}
	return msgs, nil
}

// ErrTooMany is a batch over the bound its reader was given.
var ErrTooMany = errors.New("too many messages")
