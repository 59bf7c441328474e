package avrofmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/hamba/avro/v2"
)

// avroCanonicalise checks an Avro schema's structure and returns its
// canonical text, and the lean text hamba parses (see avroLeanKeys). names
// holds the full names defined so far (by referenced schemas); the types
// this text defines are added to it. cache is hamba's cache the lean text
// will be parsed into (see ref).
//
// Which canonical form: Avro defines Parsing Canonical Form for identity,
// but PCF drops docs, aliases, defaults, field order and logical types, so
// two schemas that differ only in a default would get one id and the
// registry would hand back the wrong default. Confluent identifies a schema
// by the full text Avro's Java library prints, defaults and docs included.
// We do the same in spirit: the whole schema (docs, defaults, aliases,
// order, logical types, custom properties) as compact JSON with a fixed key
// order (PCF's name, type, fields/symbols/items/values/size first, then the
// other keys sorted), every type name written as its full name so
// "namespace" attributes fold away, {"type":"int"} written as "int", and
// the default order "ascending" dropped. Whitespace, key order and how a
// name was qualified do not change the identity; anything that changes what
// the schema means or says does. The result is itself a valid schema with
// the same canonical form.
func avroCanonicalise(text string, names map[string]bool, cache *avro.SchemaCache) (canonical, lean string, err error) {
	v, err := avroDecodeJSON(text)
	if err != nil {
		return "", "", err
	}
	c := &avroCanon{names: names, cache: cache}
	if err := c.typ(v, "", ""); err != nil {
		return "", "", err
	}
	return c.full.String(), c.lean.String(), nil
}

// avroDecodeJSON parses the schema text as one JSON value, keeping numbers
// as written, with errors located by line and column.
func avroDecodeJSON(text string) (any, error) {
	if strings.TrimSpace(text) == "" {
		return nil, errors.New("avro schema: the schema is empty")
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			// Offset counts the offending character.
			line, col := avroLineCol(text, syn.Offset-1)
			return nil, fmt.Errorf("avro schema: not valid JSON at line %d, column %d: %s", line, col, syn.Error())
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errors.New("avro schema: not valid JSON: the text ends in the middle of a value")
		}
		return nil, fmt.Errorf("avro schema: not valid JSON: %w", err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		extra := int64(len(text) - len(strings.TrimLeft(text[end:], " \t\r\n")))
		line, col := avroLineCol(text, extra)
		return nil, fmt.Errorf("avro schema: not valid JSON at line %d, column %d: text after the schema", line, col)
	}
	return v, nil
}

// avroLineCol turns a byte offset into a 1-based line and column.
func avroLineCol(text string, offset int64) (line, col int) {
	offset = max(0, min(offset, int64(len(text))))
	before := text[:offset]
	line = strings.Count(before, "\n") + 1
	col = int(offset) - strings.LastIndexByte(before, '\n')
	return line, col
}

// avroCanon walks the decoded JSON of a schema, writing the canonical text
// as it goes. Definitions are visited in document order, which is the order
// Avro makes names available in.
type avroCanon struct {
	full  strings.Builder // the canonical text
	lean  strings.Builder // the same without docs and custom properties
	names map[string]bool
	cache *avro.SchemaCache
}

// avroLeanKeys are the optional keys hamba's parser gives meaning to.
// hamba matches keys case-insensitively (through mapstructure), so a
// custom property "Default" would become a default; its input therefore
// carries only these keys, spelled exactly.
var avroLeanKeys = map[string]bool{
	"default": true, "aliases": true, "order": true,
	"logicalType": true, "precision": true, "scale": true,
}

func (c *avroCanon) raw(s string) {
	c.full.WriteString(s)
	c.lean.WriteString(s)
}

func avroCanonError(path, format string, args ...any) error {
	if path == "" {
		path = "/"
	}
	return fmt.Errorf("avro schema at %s: %s", path, fmt.Sprintf(format, args...))
}

var avroPrimitives = map[string]bool{
	"null": true, "boolean": true, "int": true, "long": true,
	"float": true, "double": true, "bytes": true, "string": true,
}

// typ writes one schema: a type name, a union (JSON array) or a type
// object. ns is the enclosing namespace.
func (c *avroCanon) typ(v any, ns, path string) error {
	switch v := v.(type) {
	case string:
		return c.ref(v, ns, path)
	case []any:
		if len(v) == 0 {
			return avroCanonError(path, "a union needs at least one type")
		}
		c.raw("[")
		for i, branch := range v {
			if i > 0 {
				c.raw(",")
			}
			if _, nested := branch.([]any); nested {
				return avroCanonError(path+"/"+strconv.Itoa(i), "a union cannot directly contain another union")
			}
			if err := c.typ(branch, ns, path+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
		c.raw("]")
		return nil
	case map[string]any:
		return c.object(v, ns, path)
	default:
		return avroCanonError(path, "a type must be a name, an object or an array (a union), not %s", avroJSONKind(v))
	}
}

// ref writes a reference to a primitive or named type. Like Avro's Java
// library, an unqualified name is looked up in the enclosing namespace
// first and then in the null namespace.
func (c *avroCanon) ref(name, ns, path string) error {
	if avroPrimitives[name] {
		c.str(name)
		return nil
	}
	full := name
	if ns != "" && !strings.Contains(name, ".") {
		full = ns + "." + name
	}
	switch {
	case c.names[full]:
		c.str(full)
	case c.names[name]:
		c.str(name)
		// hamba has no null-namespace fallback: it would look the name up
		// as ns.name, so point that name at the type when it comes from a
		// referenced schema (already in the cache).
		if t := c.cache.Get(name); t != nil && c.cache.Get(full) == nil {
			c.cache.Add(full, t)
		}
	default:
		hint := ""
		if name == "record" || name == "enum" || name == "fixed" || name == "array" || name == "map" || name == "error" {
			hint = fmt.Sprintf(` (a %s needs an object: {"type":%q,...})`, name, name)
		}
		return avroCanonError(path, "unknown type %q%s", full, hint)
	}
	return nil
}

func (c *avroCanon) object(m map[string]any, ns, path string) error {
	t, ok := m["type"]
	if !ok {
		return avroCanonError(path, `the object has no "type"`)
	}
	ts, ok := t.(string)
	if !ok {
		if _, union := t.([]any); union {
			return avroCanonError(path, `"type" must be a string; write a union as a bare JSON array of types`)
		}
		return avroCanonError(path, `"type" must be a string, not %s`, avroJSONKind(t))
	}
	switch ts {
	case "record", "error":
		return c.record(ts, m, ns, path)
	case "enum":
		return c.enum(m, ns, path)
	case "fixed":
		return c.fixed(m, ns, path)
	case "array":
		return c.container(m, ns, path, "items")
	case "map":
		return c.container(m, ns, path, "values")
	}
	if !avroPrimitives[ts] {
		// {"type":"com.example.Name"} refers to a named type.
		return c.ref(ts, ns, path)
	}
	if len(m) == 1 {
		c.str(ts)
		return nil
	}
	c.raw(`{"type":`)
	c.str(ts)
	c.rest(m, nil, "type")
	c.raw("}")
	return nil
}

// define reads the name of a named type, registers it and writes the
// leading "name" and "type" keys. It returns the namespace the type's
// children live in.
func (c *avroCanon) define(kind string, m map[string]any, ns, path string) (string, error) {
	name, ok := m["name"].(string)
	if !ok {
		return "", avroCanonError(path, "a %s needs a \"name\" string", kind)
	}
	var space string
	switch {
	case strings.Contains(name, "."):
		i := strings.LastIndexByte(name, '.')
		space, name = name[:i], name[i+1:]
	case m["namespace"] == nil:
		space = ns
	default:
		s, ok := m["namespace"].(string)
		if !ok {
			return "", avroCanonError(path, `"namespace" must be a string`)
		}
		space = s
	}
	if err := avroCheckName(name); err != nil {
		return "", avroCanonError(path, "%s name: %v", kind, err)
	}
	if space != "" {
		for _, part := range strings.Split(space, ".") {
			if err := avroCheckName(part); err != nil {
				return "", avroCanonError(path, "namespace %q: %v", space, err)
			}
		}
	}
	full := name
	if space != "" {
		full = space + "." + name
	}
	if avroPrimitives[full] {
		return "", avroCanonError(path, "%q is a primitive type and cannot be redefined", full)
	}
	if c.names[full] {
		return "", avroCanonError(path, "type %q is defined twice", full)
	}
	c.names[full] = true
	c.raw(`{"name":`)
	c.str(full)
	c.raw(`,"type":`)
	c.str(kind)
	if space == "" && ns != "" {
		// Keep the null namespace: without this a reader would place the
		// type in the enclosing namespace.
		c.raw(`,"namespace":""`)
	}
	return space, nil
}

func (c *avroCanon) record(kind string, m map[string]any, ns, path string) error {
	space, err := c.define(kind, m, ns, path)
	if err != nil {
		return err
	}
	fields, ok := m["fields"].([]any)
	if !ok {
		return avroCanonError(path, `a record needs a "fields" array`)
	}
	c.raw(`,"fields":[`)
	seen := make(map[string]bool, len(fields))
	for i, f := range fields {
		fpath := path + "/fields/" + strconv.Itoa(i)
		fm, ok := f.(map[string]any)
		if !ok {
			return avroCanonError(fpath, "a field must be an object, not %s", avroJSONKind(f))
		}
		name, ok := fm["name"].(string)
		if !ok {
			return avroCanonError(fpath, `a field needs a "name" string`)
		}
		fpath = path + "/fields/" + name
		if err := avroCheckName(name); err != nil {
			return avroCanonError(fpath, "field name: %v", err)
		}
		if seen[name] {
			return avroCanonError(fpath, "field %q appears twice", name)
		}
		seen[name] = true
		ft, ok := fm["type"]
		if !ok {
			return avroCanonError(fpath, `field %q has no "type"`, name)
		}
		if order, ok := fm["order"]; ok && order != "ascending" && order != "descending" && order != "ignore" {
			return avroCanonError(fpath, `"order" must be "ascending", "descending" or "ignore"`)
		}
		if err := avroCheckAliases(fm["aliases"], false); err != nil {
			return avroCanonError(fpath, "%v", err)
		}
		if i > 0 {
			c.raw(",")
		}
		c.raw(`{"name":`)
		c.str(name)
		c.raw(`,"type":`)
		if err := c.typ(ft, space, fpath); err != nil {
			return err
		}
		c.rest(fm, func(k string, v any) (any, bool) {
			return v, k != "order" || v != "ascending"
		}, "name", "type")
		c.raw("}")
	}
	c.raw("]")
	return c.namedRest(m, space, path, "fields")
}

func (c *avroCanon) enum(m map[string]any, ns, path string) error {
	space, err := c.define("enum", m, ns, path)
	if err != nil {
		return err
	}
	symbols, ok := m["symbols"].([]any)
	if !ok {
		return avroCanonError(path, `an enum needs a "symbols" array`)
	}
	c.raw(`,"symbols":[`)
	for i, s := range symbols {
		sym, ok := s.(string)
		if !ok {
			return avroCanonError(path+"/symbols/"+strconv.Itoa(i), "a symbol must be a string")
		}
		if err := avroCheckName(sym); err != nil {
			return avroCanonError(path+"/symbols/"+strconv.Itoa(i), "symbol: %v", err)
		}
		if i > 0 {
			c.raw(",")
		}
		c.str(sym)
	}
	c.raw("]")
	return c.namedRest(m, space, path, "symbols")
}

func (c *avroCanon) fixed(m map[string]any, ns, path string) error {
	space, err := c.define("fixed", m, ns, path)
	if err != nil {
		return err
	}
	n, ok := m["size"].(json.Number)
	if !ok {
		return avroCanonError(path, `a fixed needs a "size" number`)
	}
	size, err := strconv.ParseInt(string(n), 10, 32)
	if err != nil || size < 0 {
		return avroCanonError(path, `"size" must be a non-negative integer below 2^31, not %s`, n)
	}
	c.raw(`,"size":`)
	c.raw(strconv.FormatInt(size, 10))
	return c.namedRest(m, space, path, "size")
}

// namedRest writes the remaining keys of a named type, aliases qualified
// with the type's namespace, and closes the object.
func (c *avroCanon) namedRest(m map[string]any, space, path, body string) error {
	if err := avroCheckAliases(m["aliases"], true); err != nil {
		return avroCanonError(path, "%v", err)
	}
	c.rest(m, func(k string, v any) (any, bool) {
		if k != "aliases" {
			return v, true
		}
		list := v.([]any)
		out := make([]any, len(list))
		for i, a := range list {
			alias := a.(string)
			if space != "" && !strings.Contains(alias, ".") {
				alias = space + "." + alias
			}
			out[i] = alias
		}
		return out, true
	}, "name", "type", "namespace", body)
	c.raw("}")
	return nil
}

func (c *avroCanon) container(m map[string]any, ns, path, key string) error {
	inner, ok := m[key]
	if !ok {
		return avroCanonError(path, "an %s needs %q", m["type"], key)
	}
	c.raw(`{"type":`)
	c.str(m["type"].(string))
	c.raw(`,"` + key + `":`)
	if err := c.typ(inner, ns, path+"/"+key); err != nil {
		return err
	}
	c.rest(m, nil, "type", key)
	c.raw("}")
	return nil
}

// rest writes the keys of m not in skip, sorted, each value normalised;
// keep may rewrite a value or drop its key.
func (c *avroCanon) rest(m map[string]any, keep func(k string, v any) (any, bool), skip ...string) {
	keys := make([]string, 0, len(m))
next:
	for k := range m {
		for _, s := range skip {
			if k == s {
				continue next
			}
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		if keep != nil {
			var ok bool
			if v, ok = keep(k, v); !ok {
				continue
			}
		}
		var b strings.Builder
		b.WriteByte(',')
		avroJSON(&b, k)
		b.WriteByte(':')
		avroJSON(&b, v)
		c.full.WriteString(b.String())
		if avroLeanKeys[k] {
			c.lean.WriteString(b.String())
		}
	}
}

// avroJSON writes a decoded JSON value compactly, object keys sorted,
// numbers as written and strings without HTML escaping.
func avroJSON(b *strings.Builder, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case json.Number:
		b.WriteString(string(v))
	case string:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v) // a string always encodes
		b.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			avroJSON(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			avroJSON(b, k)
			b.WriteByte(':')
			avroJSON(b, v[k])
		}
		b.WriteByte('}')
	}
}

// str writes a JSON string.
func (c *avroCanon) str(s string) {
	var b strings.Builder
	avroJSON(&b, s)
	c.raw(b.String())
}

func avroCheckAliases(v any, dotted bool) error {
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		return errors.New(`"aliases" must be an array of names`)
	}
	for _, a := range list {
		alias, ok := a.(string)
		if !ok {
			return errors.New(`"aliases" must be an array of names`)
		}
		parts := []string{alias}
		if dotted {
			parts = strings.Split(alias, ".")
		}
		for _, p := range parts {
			if err := avroCheckName(p); err != nil {
				return fmt.Errorf("alias %q: %w", alias, err)
			}
		}
	}
	return nil
}

// avroCheckName applies Avro's name rule, [A-Za-z_][A-Za-z0-9_]*.
func avroCheckName(name string) error {
	if name == "" {
		return errors.New("a name cannot be empty")
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		letter := ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')
		if !letter && (i == 0 || ch < '0' || ch > '9') {
			return fmt.Errorf("%q is not a valid name (letters, digits and _, not starting with a digit)", name)
		}
	}
	return nil
}

func avroJSONKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	default:
		return "an object"
	}
}
