// Package avrofmt is the Avro format of the schema registry: parsing
// within schema.Limits and the canonical form, validation of one binary
// datum, and Avro's schema-resolution rules as compatibility.
package avrofmt

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"

	"github.com/semaq/semaq/internal/schema"
)

// New returns the Avro format with the default limits.
func New() schema.LimitedFormat { return avroFormat{} }

// avroMaxRefs bounds how many referenced schemas one Parse resolves, so a
// registry with a runaway reference graph cannot make a Parse unbounded.
const avroMaxRefs = 256

// avroFormat is the Avro format, with Confluent Schema Registry's meaning:
// the schema is Avro JSON, a payload is the binary encoding of one datum,
// references name types defined by schemas under other subjects.
//
// Parsing happens in two passes. Our own pass over the JSON
// (avro_canonical.go) checks the structure with precise locations, resolves
// every type name to its full name and writes the canonical text; hamba/avro
// then parses the same text less docs and custom properties, which adds
// the checks it is good at (defaults against their types, union branch
// rules). Feeding hamba our rewrite rather than the original means it only
// ever sees full names and the keys it should, so the two passes cannot
// disagree on what the schema says.
//
// Limits (limits.go) are checked on every text before either pass: size,
// JSON nesting (records in records), JSON values (fields, types), numbers,
// duplicate keys.
type avroFormat struct{ limits schema.Limits }

func (avroFormat) Type() schema.Type { return schema.TypeAvro }

// WithLimits implements LimitedFormat.
func (avroFormat) WithLimits(l schema.Limits) schema.Format { return avroFormat{limits: l} }

func (f avroFormat) Parse(text string, refs []schema.Reference, resolve schema.Resolver) (schema.Schema, error) {
	p := &avroParser{
		budget:  schema.NewBudget(f.limits),
		resolve: resolve,
		cache:   &avro.SchemaCache{},
		names:   make(map[string]bool),
		state:   make(map[string]avroRefState),
	}
	for _, ref := range refs {
		if err := p.reference(ref); err != nil {
			return nil, err
		}
	}
	if err := avroText(p.budget, "the schema", text); err != nil {
		return nil, err
	}
	canonical, lean, err := avroCanonicalise(text, p.names, p.cache)
	if err != nil {
		return nil, err
	}
	parsed, err := avroHambaParse(lean, p.cache)
	if err != nil {
		return nil, err
	}
	return &avroSchema{canonical: canonical, schema: parsed, root: avroCompile(parsed)}, nil
}

func (avroFormat) Compatibility(reader, writer schema.Schema) []schema.Incompatibility {
	r, rok := reader.(*avroSchema)
	w, wok := writer.(*avroSchema)
	if !rok || !wok {
		return []schema.Incompatibility{{
			Path:    "/",
			Rule:    "TYPE_MISMATCH",
			Message: "both schemas must be Avro schemas",
		}}
	}
	return avroCompatibility(r.schema, w.schema)
}

type avroRefState uint8

const (
	avroRefResolving avroRefState = iota + 1
	avroRefDone
)

// avroParser holds what one Parse call shares between the referenced
// schemas and the main one: hamba's cache of named types, and the set of
// full names defined so far (Avro forbids redefining a name).
type avroParser struct {
	budget  *schema.Budget
	resolve schema.Resolver
	cache   *avro.SchemaCache
	names   map[string]bool
	state   map[string]avroRefState // by subject and version
	count   int
}

// reference parses a referenced schema, after its own references (depth
// first), into the shared cache, once per subject and version.
func (p *avroParser) reference(ref schema.Reference) error {
	key := fmt.Sprintf("%s\x00%d", ref.Subject, ref.Version)
	switch p.state[key] {
	case avroRefDone:
		return nil
	case avroRefResolving:
		return fmt.Errorf("avro schema: reference cycle through subject %q version %d", ref.Subject, ref.Version)
	}
	if p.resolve == nil {
		return fmt.Errorf("avro schema: reference %q (subject %q version %d) given without a resolver", ref.Name, ref.Subject, ref.Version)
	}
	if p.count++; p.count > avroMaxRefs {
		return fmt.Errorf("avro schema: more than %d referenced schemas", avroMaxRefs)
	}
	p.state[key] = avroRefResolving
	text, typ, refs, err := p.resolve(ref)
	if err != nil {
		return fmt.Errorf("avro schema: resolving reference %q (subject %q version %d): %w", ref.Name, ref.Subject, ref.Version, err)
	}
	if typ != "" && !strings.EqualFold(string(typ), string(schema.TypeAvro)) {
		return fmt.Errorf("avro schema: reference %q (subject %q version %d) is a %s schema, not Avro", ref.Name, ref.Subject, ref.Version, typ)
	}
	for _, r := range refs {
		if err := p.reference(r); err != nil {
			return err
		}
	}
	err = avroText(p.budget, fmt.Sprintf("reference %q (subject %q version %d)", ref.Name, ref.Subject, ref.Version), text)
	var lean string
	if err == nil {
		_, lean, err = avroCanonicalise(text, p.names, p.cache)
	}
	if err == nil {
		_, err = avroHambaParse(lean, p.cache)
	}
	if err != nil {
		return fmt.Errorf("in reference %q (subject %q version %d): %w", ref.Name, ref.Subject, ref.Version, err)
	}
	p.state[key] = avroRefDone
	return nil
}

// avroText charges one Avro schema text to the budget, before any parser
// reads it.
func avroText(b *schema.Budget, what, text string) error {
	if err := b.Text(what, len(text)); err != nil {
		return err
	}
	if err := b.StrictJSON([]byte(text), false); err != nil {
		return fmt.Errorf("avro schema: %w", err)
	}
	return nil
}

// avroHambaParse parses checked schema text with hamba into cache. Our own
// pass has vetted the structure, but hamba still sees text from outside,
// so a panic in it becomes an error (the fuzzer found one: an empty union
// with a default, now refused earlier).
func avroHambaParse(text string, cache *avro.SchemaCache) (s avro.Schema, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("avro schema: rejected by the Avro parser (%v)", r)
		}
	}()
	s, err = avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, errors.New("avro schema: " + strings.TrimPrefix(err.Error(), "avro: "))
	}
	return s, nil
}

// avroSchema is a parsed Avro schema. Immutable once built.
type avroSchema struct {
	canonical string
	schema    avro.Schema
	root      *avroNode
}

func (s *avroSchema) Type() schema.Type { return schema.TypeAvro }

// Canonical is a deterministic, compact JSON of the full schema; see
// avroCanonicalise for what it keeps and why.
func (s *avroSchema) Canonical() string { return s.canonical }

// Validate decodes payload, the binary encoding of one datum, against the
// schema and requires every byte to be consumed. See avro_decode.go.
func (s *avroSchema) Validate(payload []byte) error {
	return avroValidate(s.root, payload)
}
