package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Bounds of DecodeStrict, the same for every body.
const (
	// MaxNumberLen bounds a number literal: an int64 has 19 digits and a
	// sign, and nothing the API takes needs more. A longer literal is
	// refused before anything parses it.
	MaxNumberLen = 24
	// MaxDepth bounds the nesting of objects and arrays.
	MaxDepth = 16
)

// ErrEmpty is returned by DecodeStrict for a body that is empty or only
// white space; endpoints whose body is optional treat it as "no options".
var ErrEmpty = errors.New("the body is empty")

// TooLargeError is a body over the limit of DecodeStrict: HTTP 413.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("body is larger than the limit of %d bytes", e.Limit)
}

// DecodeError is a body DecodeStrict refused: HTTP 400. The message names
// the key or the problem.
type DecodeError struct{ Msg string }

func (e *DecodeError) Error() string { return e.Msg }

// DecodeStrict reads at most maxBytes from r and decodes them, as one JSON
// value with nothing after it, into v (a pointer). It is stricter than
// encoding/json, which takes the last of duplicate keys and matches keys to
// fields without regard to case, so two parsers of the same body could act
// on different values. DecodeStrict refuses:
//   - a body over maxBytes (*TooLargeError), never truncating it;
//   - duplicate keys in an object, including ones differing only in case;
//   - a key that names a field of v only in another case, and unknown keys;
//   - number literals longer than MaxNumberLen, nesting deeper than MaxDepth;
//   - invalid UTF-8, and anything after the value.
//
// An empty body is ErrEmpty, and v is left alone.
func DecodeStrict(r io.Reader, maxBytes int64, v any) error {
	body, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return &TooLargeError{Limit: maxBytes}
		}
		return err
	}
	if int64(len(body)) > maxBytes {
		return &TooLargeError{Limit: maxBytes}
	}
	return UnmarshalStrict(body, v)
}

// UnmarshalStrict is DecodeStrict of a body already read.
func UnmarshalStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return ErrEmpty
	}
	if !utf8.Valid(body) {
		return &DecodeError{"body is not valid UTF-8"}
	}
	s := scanner{dec: json.NewDecoder(bytes.NewReader(body))}
	s.dec.UseNumber()
	if err := s.value(reflect.TypeOf(v), 0, ""); err != nil {
		return err
	}
	if _, err := s.dec.Token(); err != io.EOF {
		return &DecodeError{"body has data after the JSON value"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &DecodeError{"body is not valid: " + err.Error()}
	}
	return nil
}

// scanner walks the tokens of a body beside the type they decode into.
type scanner struct{ dec *json.Decoder }

// at prefixes a message with the key it is about, if any.
func at(where, msg string) *DecodeError {
	if where == "" {
		return &DecodeError{msg}
	}
	return &DecodeError{where + ": " + msg}
}

func (s *scanner) value(t reflect.Type, depth int, where string) error {
	tok, err := s.dec.Token()
	if err != nil {
		return &DecodeError{"body is not valid JSON: " + err.Error()}
	}
	switch tok := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return at(where, fmt.Sprintf("nested deeper than %d", MaxDepth))
		}
		if tok == '{' {
			return s.object(t, depth+1, where)
		}
		return s.array(t, depth+1, where)
	case json.Number:
		if len(tok) > MaxNumberLen {
			return at(where, fmt.Sprintf("number literal is %d characters; the limit is %d", len(tok), MaxNumberLen))
		}
	}
	return nil
}

func (s *scanner) object(t reflect.Type, depth int, where string) error {
	t = deref(t)
	seen := make(map[string]string)
	for s.dec.More() {
		tok, err := s.dec.Token()
		if err != nil {
			return &DecodeError{"body is not valid JSON: " + err.Error()}
		}
		key, _ := tok.(string)
		fk := key
		if t != nil && t.Kind() == reflect.Struct {
			// encoding/json matches a struct's fields without regard to
			// case: "A" and "a" would land in one field. Elsewhere (a
			// map, a json.RawMessage, an interface) keys are data, and
			// "A" and "a" are two.
			fk = foldKey(key)
		}
		if prev, ok := seen[fk]; ok {
			if prev == key {
				return at(where, fmt.Sprintf("key %q appears twice", key))
			}
			return at(where, fmt.Sprintf("keys %q and %q differ only in case", prev, key))
		}
		seen[fk] = key
		var ft reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Struct:
			f, exact, ok := field(t, key)
			if !ok {
				return at(where, fmt.Sprintf("unknown key %q", key))
			}
			if !exact {
				return at(where, fmt.Sprintf("key %q must be spelled %q (keys are case-sensitive)", key, f.name))
			}
			ft = f.typ
		case t.Kind() == reflect.Map:
			ft = t.Elem()
		}
		if err := s.value(ft, depth, key); err != nil {
			return err
		}
	}
	_, err := s.dec.Token() // '}'
	if err != nil {
		return &DecodeError{"body is not valid JSON: " + err.Error()}
	}
	return nil
}

func (s *scanner) array(t reflect.Type, depth int, where string) error {
	t = deref(t)
	var et reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		et = t.Elem()
	}
	for s.dec.More() {
		if err := s.value(et, depth, where); err != nil {
			return err
		}
	}
	if _, err := s.dec.Token(); err != nil { // ']'
		return &DecodeError{"body is not valid JSON: " + err.Error()}
	}
	return nil
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t.Kind() == reflect.Interface {
		return nil
	}
	return t
}

type fieldInfo struct {
	name string
	typ  reflect.Type
}

// field finds the field key decodes into, as encoding/json would: exact
// name first, then one equal under case folding.
func field(t reflect.Type, key string) (f fieldInfo, exact, ok bool) {
	fields := jsonFields(t)
	for _, f := range fields {
		if f.name == key {
			return f, true, true
		}
	}
	fk := foldKey(key)
	for _, f := range fields {
		if foldKey(f.name) == fk {
			return f, false, true
		}
	}
	return fieldInfo{}, false, false
}

// fieldsCache holds jsonFields by type: every request of a kind decodes
// into the same types.
var fieldsCache sync.Map // reflect.Type -> []fieldInfo

// jsonFields lists the JSON names of a struct's fields, embedded structs
// flattened.
func jsonFields(t reflect.Type) []fieldInfo {
	if f, ok := fieldsCache.Load(t); ok {
		return f.([]fieldInfo)
	}
	f := structFields(t)
	fieldsCache.Store(t, f)
	return f
}

func structFields(t reflect.Type) []fieldInfo {
	var out []fieldInfo
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			if et := deref(sf.Type); et != nil && et.Kind() == reflect.Struct {
				out = append(out, structFields(et)...)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out = append(out, fieldInfo{name: name, typ: sf.Type})
	}
	return out
}

// foldKey maps every rune to the smallest of its case-folding orbit, so two
// keys encoding/json would match to the same field (including 'ſ' for 's'
// and the Kelvin sign for 'k') have the same foldKey.
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}
