// Package infer derives a JSON Schema (draft 2020-12) from sample JSON
// documents.
//
// The result describes what every sample has in common: the types seen at
// each location, the object properties present in every sample (required),
// string formats every value matches (date-time, uuid, email, uri), small
// enumerations, and nested objects and arrays. The same samples always give
// the same schema, byte for byte. docs/schema-registry.md documents the
// rules.
//
// Objects are open by default: properties the samples did not show are
// allowed. With Inferrer.Closed every object gets "additionalProperties":
// false, which is what a subject evolved under BACKWARD compatibility wants:
// Confluent's rules let a closed object gain optional properties, while an
// open one may only gain properties whose schema accepts anything.
package infer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"net/url"
	"regexp"
	"slices"
	"time"
)

// Limits of the inference. Past MaxDepth a location is described as {}
// (anything), so hostile input cannot exhaust the stack.
const (
	MaxDepth = 64
	// EnumMax is the most distinct values a string location may have to
	// become an enum.
	EnumMax = 5
	// EnumRepeat is how many times on average each distinct value must
	// occur: a field seen twice with two values says nothing about its
	// domain.
	EnumRepeat = 3
	// MaxLine bounds one sample.
	MaxLine = 16 << 20
)

// ErrNoSamples is returned when the input holds no JSON document.
var ErrNoSamples = errors.New("infer: no samples")

// Inferrer accumulates samples. The zero value is ready to use; it is not
// safe for concurrent use.
type Inferrer struct {
	// Closed makes every object of the schema closed
	// ("additionalProperties": false).
	Closed bool

	root    shape
	samples int
}

// shape is what was seen at one location across samples.
type shape struct {
	seen int // values seen here (including nulls)

	nulls, bools, ints, nums, strs, objs, arrs int

	// strings
	values   map[string]int // distinct values, until more than EnumMax
	tooMany  bool
	dateTime bool // every string so far matches (valid while strs > 0)
	uuid     bool
	email    bool
	uri      bool

	// objects
	props map[string]*shape
	count map[string]int // objects that had the property

	// arrays
	items *shape

	deep bool // past MaxDepth
}

// Add merges one decoded sample (as from json.Decoder with UseNumber).
func (in *Inferrer) Add(v any) {
	in.samples++
	in.root.add(v, 0)
}

// AddJSON decodes one document and adds it.
func (in *Inferrer) AddJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	in.Add(v)
	return nil
}

// ReadLines adds one sample per non-blank line of r. An invalid line is an
// error naming the line.
func (in *Inferrer) ReadLines(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := in.AddJSON(b); err != nil {
			return fmt.Errorf("line %d: invalid JSON: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %w", line+1, err)
	}
	return nil
}

// Samples is the number of samples added.
func (in *Inferrer) Samples() int { return in.samples }

// Schema returns the inferred schema as a JSON-encodable map.
func (in *Inferrer) Schema() (map[string]any, error) {
	if in.samples == 0 {
		return nil, ErrNoSamples
	}
	s := in.root.schema(in.Closed)
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	return s, nil
}

// JSON returns the inferred schema, indented, with a trailing newline.
// Object keys are sorted, so the output is deterministic.
func (in *Inferrer) JSON() ([]byte, error) {
	s, err := in.Schema()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (s *shape) add(v any, depth int) {
	s.seen++
	if depth >= MaxDepth {
		s.deep = true
		return
	}
	switch v := v.(type) {
	case nil:
		s.nulls++
	case bool:
		s.bools++
	case json.Number:
		if _, err := v.Int64(); err == nil {
			s.ints++
		} else {
			s.nums++
		}
	case float64: // from decoders without UseNumber
		if v == float64(int64(v)) {
			s.ints++
		} else {
			s.nums++
		}
	case string:
		s.addString(v)
	case map[string]any:
		s.objs++
		if s.props == nil {
			s.props = make(map[string]*shape)
			s.count = make(map[string]int)
		}
		for k, pv := range v {
			p := s.props[k]
			if p == nil {
				p = &shape{}
				s.props[k] = p
			}
			s.count[k]++
			p.add(pv, depth+1)
		}
	case []any:
		s.arrs++
		for _, e := range v {
			if s.items == nil {
				s.items = &shape{}
			}
			s.items.add(e, depth+1)
		}
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func (s *shape) addString(v string) {
	first := s.strs == 0
	s.strs++
	if !s.tooMany {
		if s.values == nil {
			s.values = make(map[string]int)
		}
		s.values[v]++
		if len(s.values) > EnumMax {
			s.tooMany, s.values = true, nil
		}
	}
	if first {
		s.dateTime, s.uuid, s.email, s.uri = true, true, true, true
	}
	if s.dateTime {
		_, err := time.Parse(time.RFC3339Nano, v)
		s.dateTime = err == nil
	}
	if s.uuid {
		s.uuid = uuidRE.MatchString(v)
	}
	if s.email {
		a, err := mail.ParseAddress(v)
		s.email = err == nil && a.Address == v && a.Name == ""
	}
	if s.uri {
		u, err := url.Parse(v)
		s.uri = err == nil && u.Scheme != "" && (u.Host != "" || u.Opaque != "") && len(v) <= 2048
	}
}

// schema renders the shape. Types are listed in a fixed order.
func (s *shape) schema(closed bool) map[string]any {
	out := map[string]any{}
	if s.deep {
		return out
	}
	var types []string
	add := func(n int, t string) {
		if n > 0 {
			types = append(types, t)
		}
	}
	add(s.arrs, "array")
	add(s.bools, "boolean")
	if s.nums > 0 {
		types = append(types, "number") // integers are numbers too
	} else {
		add(s.ints, "integer")
	}
	add(s.objs, "object")
	add(s.strs, "string")
	add(s.nulls, "null")
	switch len(types) {
	case 0:
		return out
	case 1:
		out["type"] = types[0]
	default:
		out["type"] = types
	}
	if s.strs > 0 {
		switch {
		case s.dateTime:
			out["format"] = "date-time"
		case s.uuid:
			out["format"] = "uuid"
		case s.email:
			out["format"] = "email"
		case s.uri:
			out["format"] = "uri"
		case !s.tooMany && len(s.values) > 0 && s.strs >= EnumRepeat*len(s.values) && s.strs == s.seen-s.nulls:
			vals := make([]any, 0, len(s.values)+1)
			keys := make([]string, 0, len(s.values))
			for v := range s.values {
				keys = append(keys, v)
			}
			slices.Sort(keys)
			for _, k := range keys {
				vals = append(vals, k)
			}
			if s.nulls > 0 {
				vals = append(vals, nil)
			}
			out["enum"] = vals
		}
	}
	if s.objs > 0 && len(s.props) > 0 {
		props := map[string]any{}
		var required []string
		for k, p := range s.props {
			props[k] = p.schema(closed)
			if s.count[k] == s.objs {
				required = append(required, k)
			}
		}
		out["properties"] = props
		if len(required) > 0 {
			slices.Sort(required)
			out["required"] = required
		}
	}
	if s.objs > 0 && closed {
		out["additionalProperties"] = false
	}
	if s.arrs > 0 && s.items != nil {
		out["items"] = s.items.schema(closed)
	}
	return out
}
