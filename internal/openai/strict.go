package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Limits of the strict pass over a request body (checkStrict).
const (
	// MaxNumberLen bounds a number literal anywhere in a body: no model
	// parameter needs more, and a 1e999999 or a megabyte of digits is
	// refused before anything parses it as a number.
	MaxNumberLen = 64
	// MaxDepth bounds the nesting of objects and arrays.
	MaxDepth = 64
)

// shape lists the keys SemaQ reads in an object of a request and what
// their values hold: nested objects (fields), arrays of objects (elem),
// integers (integer).
type shape struct {
	fields  map[string]*shape
	elem    *shape
	integer bool
}

var (
	leaf    = &shape{}
	integer = &shape{integer: true}
	// chatShape mirrors ChatRequest and the types under it: every key that
	// encoding/json would match into them.
	chatShape = &shape{fields: map[string]*shape{
		"model": leaf,
		"messages": {elem: &shape{fields: map[string]*shape{
			"role":    leaf,
			"content": {elem: &shape{fields: map[string]*shape{"type": leaf, "text": leaf}}},
			"name":    leaf,
			"tool_calls": {elem: &shape{fields: map[string]*shape{
				"id":       leaf,
				"type":     leaf,
				"function": {fields: map[string]*shape{"name": leaf, "arguments": leaf}},
			}}},
			"tool_call_id": leaf,
		}}},
		"stream":                leaf,
		"stream_options":        {fields: map[string]*shape{"include_usage": leaf}},
		"max_tokens":            integer,
		"max_completion_tokens": integer,
		"n":                     integer,
		"user":                  leaf,
	}}
)

// checkStrict walks body and refuses what a lenient reader and a strict
// one would read differently. encoding/json matches keys without regard
// to case and keeps the last of duplicates; a Python or JavaScript
// upstream matches exactly and may keep the first. So a body with
// {"model":"a","Model":"b"} would be queued and accounted as b and run as
// a. Refused: a key given twice in one object (anywhere), a key that
// differs only in case (Unicode folding included) from one SemaQ reads, a
// number literal over MaxNumberLen bytes, a non-integer or oversized
// value for an integer field, nesting deeper than MaxDepth.
func checkStrict(body []byte) *Error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	w := walker{dec: dec}
	return w.value(chatShape, "", 0)
}

type walker struct {
	dec *json.Decoder
}

// errSyntax stands for a body that is not JSON; ParseChatRequest's own
// decode then reports it in its words.
var errSyntax = &Error{Type: TypeInvalidRequest}

func (w *walker) token() (json.Token, *Error) {
	t, err := w.dec.Token()
	if err != nil {
		return nil, errSyntax
	}
	return t, nil
}

// value reads one value at path (the param it is reported as) that
// should have shape s (nil: not read by SemaQ).
func (w *walker) value(s *shape, path string, depth int) *Error {
	t, e := w.token()
	if e != nil {
		return e
	}
	return w.valueFrom(t, s, path, depth)
}

func (w *walker) valueFrom(t json.Token, s *shape, path string, depth int) *Error {
	switch v := t.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return invalid(path, fmt.Sprintf("The request body nests objects and arrays deeper than %d levels.", MaxDepth))
		}
		if v == '{' {
			return w.object(s, path, depth+1)
		}
		return w.array(s, path, depth+1)
	case json.Number:
		if len(v) > MaxNumberLen {
			return invalid(path, fmt.Sprintf("Invalid value for '%s': a number literal of %d bytes; at most %d.", clip(path), len(v), MaxNumberLen))
		}
		if s != nil && s.integer {
			if _, err := strconv.ParseInt(string(v), 10, 32); err != nil {
				return invalid(path, fmt.Sprintf("Invalid value for '%s': %s is not an integer between %d and %d.", clip(path), string(v), -1<<31, 1<<31-1))
			}
		}
	}
	return nil
}

func (w *walker) object(s *shape, path string, depth int) *Error {
	seen := map[string]struct{}{}
	for {
		t, e := w.token()
		if e != nil {
			return e
		}
		if t == json.Delim('}') {
			return nil
		}
		key, ok := t.(string)
		if !ok {
			return errSyntax
		}
		kp := join(path, key)
		shown := clip(kp)
		if _, dup := seen[key]; dup {
			return invalid(kp, fmt.Sprintf("Duplicate key '%s' in the request body: each key may appear once.", shown))
		}
		seen[key] = struct{}{}
		var child *shape
		if s != nil && s.fields != nil {
			child = s.fields[key]
			if child == nil {
				for known := range s.fields {
					if strings.EqualFold(key, known) {
						return invalid(kp, fmt.Sprintf("Unrecognized key '%s': keys are case-sensitive; the parameter is '%s'.", shown, clip(join(path, known))))
					}
				}
			}
		}
		if e := w.value(child, kp, depth); e != nil {
			return e
		}
	}
}

func (w *walker) array(s *shape, path string, depth int) *Error {
	var elem *shape
	if s != nil {
		elem = s.elem
	}
	for i := 0; ; i++ {
		t, e := w.token()
		if e != nil {
			return e
		}
		if t == json.Delim(']') {
			return nil
		}
		if e := w.valueFrom(t, elem, path+"["+strconv.Itoa(i)+"]", depth); e != nil {
			return e
		}
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func invalid(param, msg string) *Error {
	return &Error{Message: msg, Type: TypeInvalidRequest, Param: Str(clip(param))}
}

// clip shortens what a client sent before it is quoted back.
func clip(s string) string {
	if len(s) <= 128 {
		return s
	}
	return s[:128] + "..."
}
