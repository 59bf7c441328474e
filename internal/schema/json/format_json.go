// Package jsonfmt is the JSON Schema format of the schema registry
// (drafts 4 to 2020-12, compiled by santhosh-tekuri/jsonschema, draft 7
// when a schema names none): parsing within schema.Limits, payload
// validation with a fast path and a step bound, and Confluent's
// compatibility rules for JSON Schema.
package jsonfmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/semaq/semaq/internal/schema"
)

// New returns the JSON Schema format with the default limits.
func New() schema.LimitedFormat { return jsonFormat{} }

// jsonDefaultDraft is the draft of a schema without "$schema". Confluent
// Schema Registry reads such a schema as draft-07 (its JsonSchema falls back
// to SpecificationVersion.DRAFT_7), so SemaQ does the same: one text means
// one thing in both registries. Drafts 2019-09 and 2020-12 (and the older
// 04 and 06) are chosen with "$schema".
var jsonDefaultDraft = jsonschema.Draft7

// jsonRootURL is the address a schema is compiled under when it has no
// absolute $id. Reference names that are relative URIs resolve against it
// (or against the schema's own $id), exactly as the schema's $refs do.
const (
	jsonRootDir = "https://schemas.semaq.invalid/"
	jsonRootURL = jsonRootDir + "__root__.json"
)

// jsonMaxRefs bounds how many referenced schemas one Parse loads, so a
// runaway reference graph cannot make a Parse unbounded.
const jsonMaxRefs = 256

// jsonFormat is JSON Schema with Confluent Schema Registry's meaning: the
// schema is a JSON Schema document, a payload is one JSON document, and a
// reference makes another subject's schema loadable under the URI its
// Reference.Name gives, for the $refs that use that URI.
//
// Validation is santhosh-tekuri/jsonschema's; compatibility is our own
// port of Confluent's diff rules (compat_json.go) over a model of the
// schema text (json_model.go), because those rules are defined on the
// keywords as written rather than on what the validator compiles.
//
// schema.Limits (../limits.go) are checked on every document before the
// compiler sees it: its compile time grows much faster than the text.
type jsonFormat struct{ limits schema.Limits }

func (jsonFormat) Type() schema.Type { return schema.TypeJSON }

// WithLimits implements LimitedFormat.
func (jsonFormat) WithLimits(l schema.Limits) schema.Format { return jsonFormat{limits: l} }

// jsonSchema is a parsed JSON Schema.
type jsonSchema struct {
	canonical string
	compiled  *jsonschema.Schema
	fast      *jsonFast // nil: every payload goes to the library
	model     *jsonNode
	limits    schema.Limits // with defaults
}

func (s *jsonSchema) Type() schema.Type { return schema.TypeJSON }
func (s *jsonSchema) Canonical() string { return s.canonical }

// jsonDoc is one schema document: the root or a referenced schema.
type jsonDoc struct {
	url   string // absolute URL it is registered under
	raw   any    // decoded with json.Number
	draft int    // 4, 6, 7, 2019 or 2020
}

func (f jsonFormat) Parse(text string, refs []schema.Reference, resolve schema.Resolver) (schema.Schema, error) {
	b := schema.NewBudget(f.limits)
	raw, err := jsonDecodeSchema(text, "the schema", b)
	if err != nil {
		return nil, err
	}
	if err := jsonCheckSchemaValue(raw); err != nil {
		return nil, err
	}
	if err := jsonCheckPatterns(raw, jsonDraftOf(raw), b, ""); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonDefaultDraft)
	c.UseLoader(jsonNoLoader{})

	root := &jsonDoc{url: jsonRootURL, raw: raw, draft: jsonDraftOf(raw)}
	docs := []*jsonDoc{root}
	if len(refs) > 0 {
		more, err := jsonLoadReferences(c, jsonResourceBase(root.url, raw, root.draft), refs, resolve, b)
		if err != nil {
			return nil, err
		}
		docs = append(docs, more...)
	}
	if err := c.AddResource(root.url, raw); err != nil {
		return nil, fmt.Errorf("JSON Schema: %v", err)
	}
	compiled, err := c.Compile(root.url)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON Schema: %s", jsonCompileMessage(err))
	}
	jsonIgnoreRefSiblings(compiled)
	fast, _ := jsonCompileFast(compiled)
	return &jsonSchema{
		canonical: jsonCanonical(raw),
		compiled:  compiled,
		fast:      fast,
		model:     jsonBuildModel(docs),
		limits:    b.Limits(),
	}, nil
}

// jsonDecodeSchema checks a schema document against the budget (size,
// depth, values, numbers, duplicate keys), then decodes it.
func jsonDecodeSchema(text, what string, b *schema.Budget) (any, error) {
	if err := b.Text(what, len(text)); err != nil {
		return nil, err
	}
	if err := b.StrictJSON([]byte(text), false); err != nil {
		return nil, fmt.Errorf("invalid JSON Schema: %w", err)
	}
	raw, err := jsonDecode([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("JSON Schema is not valid JSON: %w", err)
	}
	return raw, nil
}

// jsonCheckPatterns charges the regular expressions of a schema document
// (pattern, patternProperties keys, at every subschema) to the budget.
// Depth is already bounded by the strict scan.
func jsonCheckPatterns(v any, draft int, b *schema.Budget, ptr string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	if p, ok := m["pattern"].(string); ok {
		if err := b.Pattern(ptr+"/pattern", p); err != nil {
			return err
		}
	}
	if pp, ok := m["patternProperties"].(map[string]any); ok {
		for _, k := range jsonSortedKeys(pp) {
			if err := b.Pattern(ptr+"/patternProperties/"+schema.EscapeToken(k), k); err != nil {
				return err
			}
		}
	}
	var err error
	jsonEachSubschema(m, draft, func(sub any, tokens ...string) {
		if err == nil {
			err = jsonCheckPatterns(sub, draft, b, ptr+jsonPointer(tokens))
		}
	})
	return err
}

// jsonCheckSchemaValue rejects documents that cannot be a schema at all,
// before the compiler reports it less plainly.
func jsonCheckSchemaValue(raw any) error {
	switch raw.(type) {
	case map[string]any, bool:
		return nil
	}
	return fmt.Errorf("invalid JSON Schema: the document must be a JSON object or a boolean, got %s", jsonTypeName(raw))
}

// jsonLoadReferences resolves refs transitively and registers each
// referenced document with the compiler. A name resolves against the base
// of the schema that lists it, like the $ref that uses it.
func jsonLoadReferences(c *jsonschema.Compiler, base string, refs []schema.Reference, resolve schema.Resolver, b *schema.Budget) ([]*jsonDoc, error) {
	if resolve == nil {
		return nil, errors.New("JSON Schema has references but no resolver was given")
	}
	type pending struct {
		ref  schema.Reference
		base string
	}
	queue := make([]pending, 0, len(refs))
	for _, r := range refs {
		queue = append(queue, pending{r, base})
	}
	var docs []*jsonDoc
	seen := map[string]schema.Reference{}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		where := fmt.Sprintf("reference %q (subject %q, version %d)", p.ref.Name, p.ref.Subject, p.ref.Version)
		u, err := jsonResolveURL(p.base, p.ref.Name)
		if err != nil {
			return nil, fmt.Errorf("%s: the name is not a valid URI: %v", where, err)
		}
		if prev, ok := seen[u]; ok {
			if prev.Subject != p.ref.Subject || prev.Version != p.ref.Version {
				return nil, fmt.Errorf("%s: %s is already subject %q version %d", where, u, prev.Subject, prev.Version)
			}
			continue
		}
		if len(seen) == jsonMaxRefs {
			return nil, fmt.Errorf("JSON Schema references more than %d schemas", jsonMaxRefs)
		}
		seen[u] = p.ref
		text, typ, sub, err := resolve(p.ref)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if typ != schema.TypeJSON && typ != "" {
			return nil, fmt.Errorf("%s: a JSON Schema can only reference JSON schemas, this one is %s", where, typ)
		}
		if err := b.Text(where, len(text)); err != nil {
			return nil, err
		}
		if err := b.StrictJSON([]byte(text), false); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		raw, err := jsonDecode([]byte(text))
		if err != nil {
			return nil, fmt.Errorf("%s: not valid JSON: %w", where, err)
		}
		if err := jsonCheckSchemaValue(raw); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if err := jsonCheckPatterns(raw, jsonDraftOf(raw), b, ""); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if err := c.AddResource(u, raw); err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		d := &jsonDoc{url: u, raw: raw, draft: jsonDraftOf(raw)}
		docs = append(docs, d)
		subBase := jsonResourceBase(u, raw, d.draft)
		for _, r := range sub {
			queue = append(queue, pending{r, subBase})
		}
	}
	return docs, nil
}

// jsonResolveURL resolves ref against base and drops any fragment.
func jsonResolveURL(base, ref string) (string, error) {
	b, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u, err := b.Parse(ref)
	if err != nil {
		return "", err
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String(), nil
}

// jsonResourceBase is the base URI of a document registered at u: its own
// $id when it has one.
func jsonResourceBase(u string, raw any, draft int) string {
	m, ok := raw.(map[string]any)
	if !ok {
		return u
	}
	id, ok := m[jsonIDKeyword(draft)].(string)
	if !ok || id == "" || strings.HasPrefix(id, "#") {
		return u
	}
	if r, err := jsonResolveURL(u, id); err == nil {
		return r
	}
	return u
}

// jsonDraftOf reads the draft a document declares; draft-07 by default.
func jsonDraftOf(raw any) int {
	m, ok := raw.(map[string]any)
	if !ok {
		return 7
	}
	s, _ := m["$schema"].(string)
	switch {
	case strings.Contains(s, "2020-12"):
		return 2020
	case strings.Contains(s, "2019-09"):
		return 2019
	case strings.Contains(s, "draft-06"):
		return 6
	case strings.Contains(s, "draft-04"):
		return 4
	}
	return 7
}

func jsonIDKeyword(draft int) string {
	if draft == 4 {
		return "id"
	}
	return "$id"
}

// jsonNoLoader refuses every URL the schema did not bring along: a schema
// is compiled from its text and its references only, never from the
// network or the file system.
type jsonNoLoader struct{}

func (jsonNoLoader) Load(u string) (any, error) {
	return nil, fmt.Errorf("no schema is known at %s (a $ref target must be listed in the schema's references, a $schema must name a supported draft)", u)
}

// jsonCompileMessage makes the compiler's error read in terms of the
// schema the user sent, not the synthetic URL it was compiled under. A
// schema that breaks its metaschema is reported like a payload that breaks
// a schema: the most specific failure, with its place in the schema.
func jsonCompileMessage(err error) string {
	var sve *jsonschema.SchemaValidationError
	var verr *jsonschema.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &verr) {
		v := jsonValidationError(verr)
		path := v.Path
		if path == "" {
			path = "/"
		}
		return fmt.Sprintf("at %s: %s (%s keyword of the metaschema)", path, v.Message, v.Rule)
	}
	var lue *jsonschema.LoadURLError
	if errors.As(err, &lue) {
		return jsonShortURL(lue.Err.Error())
	}
	return jsonShortURL(strings.TrimPrefix(err.Error(), "jsonschema: "))
}

// jsonShortURL writes the synthetic addresses as the user wrote them.
func jsonShortURL(msg string) string {
	msg = strings.ReplaceAll(msg, jsonRootURL+"#", "#")
	msg = strings.ReplaceAll(msg, jsonRootURL, "the schema")
	return strings.ReplaceAll(msg, jsonRootDir, "")
}

// jsonCanonical writes v as compact JSON with object keys sorted and
// numbers exactly as written.
func jsonCanonical(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Values decoded by jsonDecode always encode; keep a stable
		// fallback rather than panic.
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// jsonDecodeError is malformed JSON, with where it went wrong: a 1-based
// line and column and the 0-based byte offset of the offending byte.
type jsonDecodeError struct {
	line, column int
	offset       int64
	msg          string
}

func (e *jsonDecodeError) Error() string {
	return fmt.Sprintf("line %d, column %d (byte %d): %s", e.line, e.column, e.offset, e.msg)
}

// jsonDecode reads exactly one JSON document, numbers as json.Number (the
// representation the validator expects, without float rounding).
func jsonDecode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &syn):
			// Offset counts the offending byte; report that byte.
			return nil, jsonDecodeErrorAt(data, syn.Offset-1, syn.Error())
		case errors.Is(err, io.EOF):
			return nil, jsonDecodeErrorAt(data, 0, "empty document")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, jsonDecodeErrorAt(data, int64(len(data)), "unexpected end of JSON input")
		default:
			return nil, jsonDecodeErrorAt(data, dec.InputOffset(), err.Error())
		}
	}
	off := dec.InputOffset()
	for i, c := range data[off:] {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return nil, jsonDecodeErrorAt(data, off+int64(i), fmt.Sprintf("invalid character %q after the JSON document", c))
	}
	return v, nil
}

func jsonDecodeErrorAt(data []byte, offset int64, msg string) *jsonDecodeError {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	if offset < 0 {
		offset = 0
	}
	before := data[:offset]
	line := bytes.Count(before, []byte{'\n'}) + 1
	column := int(offset) - bytes.LastIndexByte(before, '\n')
	return &jsonDecodeError{line: line, column: column, offset: offset, msg: msg}
}

// Validate checks that payload is one JSON document the schema accepts.
// The byte path (fastpath_tape.go) accepts most valid payloads without
// decoding them; every other payload is decoded, and then decided and
// explained as it always was, so errors do not depend on the path.
func (s *jsonSchema) Validate(payload []byte) error {
	if s.validBytes(payload) {
		return nil
	}
	return s.validateDecoded(payload)
}

// validateDecoded is Validate on the payload decoded into Go values.
func (s *jsonSchema) validateDecoded(payload []byte) error {
	v, err := jsonDecode(payload)
	if err != nil {
		return &schema.ValidationError{Rule: "json", Message: "not valid JSON at " + err.Error()}
	}
	values, verr := jsonScanPayload(payload, s.limits)
	if verr != nil {
		return verr
	}
	budget := jsonStepBudget(s.limits, values)
	// The fast path stops at the budget, and does not decide then: it
	// follows $ref loops that the library cuts short.
	if s.fast != nil && s.fast.validWithin(v, budget) == jsonValid {
		return nil
	}
	// The library evaluates every branch to explain a failure, and cannot
	// be stopped: count what that costs before letting it start.
	if !jsonLibraryWithin(s.compiled, v, budget) {
		return jsonOverBudgetError(s.limits, values)
	}
	err = s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var lerr *jsonschema.ValidationError
	if !errors.As(err, &lerr) {
		return &schema.ValidationError{Rule: "schema", Message: err.Error()}
	}
	return jsonValidationError(lerr)
}

// jsonValidationError reports the most specific failure: the leaf error
// deepest in the payload, ties broken by path so the answer does not
// depend on map iteration order.
func jsonValidationError(top *jsonschema.ValidationError) *schema.ValidationError {
	var best *jsonschema.ValidationError
	var bestPath string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		p := jsonPointer(e.InstanceLocation)
		if best == nil || len(e.InstanceLocation) > len(best.InstanceLocation) ||
			(len(e.InstanceLocation) == len(best.InstanceLocation) && p < bestPath) {
			best, bestPath = e, p
		}
	}
	walk(top)
	if best == nil {
		best, bestPath = top, jsonPointer(top.InstanceLocation)
	}
	return &schema.ValidationError{Path: bestPath, Rule: jsonRule(best.ErrorKind), Message: jsonKindMessage(best.ErrorKind)}
}

// jsonPrinter renders the validator's messages in English.
var jsonPrinter = message.NewPrinter(language.English)

func jsonRule(k jsonschema.ErrorKind) string {
	switch k.(type) {
	case *kind.FalseSchema:
		return "false"
	case *kind.Not:
		return "not"
	case *kind.Dependency:
		return "dependencies"
	case *kind.RefCycle:
		return "$ref"
	case *kind.InvalidJsonValue:
		return "json"
	}
	if kp := k.KeywordPath(); len(kp) > 0 {
		return kp[0]
	}
	return "schema"
}

func jsonKindMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Required:
		return "missing " + jsonQuotedList("property", "properties", k.Missing)
	case *kind.AdditionalProperties:
		if len(k.Properties) == 1 {
			return fmt.Sprintf("property %q is not allowed", k.Properties[0])
		}
		return jsonQuotedList("property", "properties", k.Properties) + " are not allowed"
	case *kind.Type:
		return fmt.Sprintf("expected %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = jsonShort(w)
		}
		return fmt.Sprintf("%s is not one of %s", jsonShort(k.Got), strings.Join(want, ", "))
	case *kind.Const:
		return fmt.Sprintf("%s is not %s", jsonShort(k.Got), jsonShort(k.Want))
	case *kind.FalseSchema:
		return "no value is allowed here"
	case *kind.Not:
		return "value matches the schema under \"not\""
	case *kind.MinLength:
		return fmt.Sprintf("string has %d characters, fewer than minLength %d", k.Got, k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("string has %d characters, more than maxLength %d", k.Got, k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("array has %d items, fewer than minItems %d", k.Got, k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("array has %d items, more than maxItems %d", k.Got, k.Want)
	}
	return k.LocalizedString(jsonPrinter)
}

// jsonShort writes a JSON value for a message, cut to a readable length.
func jsonShort(v any) string {
	s := jsonCanonical(v)
	if len(s) <= 40 {
		return s
	}
	cut := 37
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func jsonQuotedList(one, many string, names []string) string {
	names = slices.Clone(names)
	slices.Sort(names)
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) == 1 {
		return one + " " + q[0]
	}
	return many + " " + strings.Join(q, ", ")
}

// jsonPointer writes path tokens as an RFC 6901 JSON pointer.
func jsonPointer(tokens []string) string {
	if len(tokens) == 0 {
		return ""
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(schema.EscapeToken(t))
	}
	return b.String()
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
