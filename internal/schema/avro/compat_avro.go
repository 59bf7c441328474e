package avrofmt

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hamba/avro/v2"

	"github.com/semaq/semaq/internal/schema"
)

// Avro compatibility follows the "Schema Resolution" section of the Avro
// specification as Avro's Java SchemaCompatibility applies it, which is
// what Confluent's AvroCompatibilityChecker runs: same rule names, same
// decisions (named types match on their unqualified name or a reader
// alias; logical types are ignored; an enum with a default reads unknown
// symbols; records met again while being checked are assumed compatible,
// which ends recursion). Paths name fields rather than Java's field
// positions: /fields/address/fields/zip, /fields/tags/items,
// /fields/scores/values, /fields/choice/1 for a writer union's branch.

// Rule names of Avro incompatibilities, as Java's SchemaIncompatibilityType
// spells them.
const (
	avroRuleNameMismatch     = "NAME_MISMATCH"
	avroRuleFixedSize        = "FIXED_SIZE_MISMATCH"
	avroRuleMissingSymbols   = "MISSING_ENUM_SYMBOLS"
	avroRuleMissingDefault   = "READER_FIELD_MISSING_DEFAULT_VALUE"
	avroRuleTypeMismatch     = "TYPE_MISMATCH"
	avroRuleMissingUnionType = "MISSING_UNION_BRANCH"
)

// avroCompatibility lists why data written with writer cannot be read
// with reader.
func avroCompatibility(reader, writer avro.Schema) []schema.Incompatibility {
	c := &avroCompat{
		active:   make(map[avroPair]bool),
		done:     make(map[avroPair]bool),
		reported: make(map[avroPair]bool),
	}
	var out []schema.Incompatibility
	c.check(reader, writer, "", &out)
	return out
}

// avroPair is a reader and writer record being compared.
type avroPair struct{ reader, writer *avro.RecordSchema }

type avroCompat struct {
	// trial > 0 while checking whether a union branch fits: results are
	// only counted, not reported.
	trial    int
	active   map[avroPair]bool // being checked: assume compatible (recursion)
	done     map[avroPair]bool // checked: whether compatible
	reported map[avroPair]bool // checked with reporting on
}

func avroDeref(s avro.Schema) avro.Schema {
	if ref, ok := s.(*avro.RefSchema); ok {
		return ref.Schema()
	}
	return s
}

func avroAdd(out *[]schema.Incompatibility, path, rule, format string, args ...any) {
	if path == "" {
		path = "/"
	}
	*out = append(*out, schema.Incompatibility{Path: path, Rule: rule, Message: fmt.Sprintf(format, args...)})
}

// avroTypeName names a schema for messages: a named type's full name,
// else its type.
func avroTypeName(s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return fmt.Sprintf("%s %s", s.Type(), n.FullName())
	}
	return string(s.Type())
}

func (c *avroCompat) check(reader, writer avro.Schema, path string, out *[]schema.Incompatibility) {
	reader, writer = avroDeref(reader), avroDeref(writer)
	if reader.Type() == writer.Type() {
		switch r := reader.(type) {
		case *avro.ArraySchema:
			c.check(r.Items(), writer.(*avro.ArraySchema).Items(), path+"/items", out)
		case *avro.MapSchema:
			c.check(r.Values(), writer.(*avro.MapSchema).Values(), path+"/values", out)
		case *avro.FixedSchema:
			w := writer.(*avro.FixedSchema)
			avroNames(r, w, path, out)
			if r.Size() != w.Size() {
				avroAdd(out, path+"/size", avroRuleFixedSize, "the writer's fixed %s has %d bytes, the reader's %s has %d", w.FullName(), w.Size(), r.FullName(), r.Size())
			}
		case *avro.EnumSchema:
			w := writer.(*avro.EnumSchema)
			avroNames(r, w, path, out)
			avroSymbols(r, w, path, out)
		case *avro.RecordSchema:
			c.record(r, writer.(*avro.RecordSchema), path, out)
		case *avro.UnionSchema:
			for i, branch := range writer.(*avro.UnionSchema).Types() {
				if !c.compatible(r, branch) {
					avroAdd(out, path+"/"+strconv.Itoa(i), avroRuleMissingUnionType, "the reader's union has no branch that reads the writer's %s (writer branch %d)", avroTypeName(avroDeref(branch)), i)
				}
			}
		}
		// Primitives (null, boolean, int, long, float, double, bytes,
		// string) of one type always match.
		return
	}

	if w, ok := writer.(*avro.UnionSchema); ok {
		// A non-union reader reads a writer union if it reads every branch.
		for _, branch := range w.Types() {
			c.check(reader, branch, path, out)
		}
		return
	}

	switch reader.Type() {
	case avro.Long:
		if writer.Type() == avro.Int {
			return
		}
	case avro.Float:
		if writer.Type() == avro.Int || writer.Type() == avro.Long {
			return
		}
	case avro.Double:
		if writer.Type() == avro.Int || writer.Type() == avro.Long || writer.Type() == avro.Float {
			return
		}
	case avro.Bytes:
		if writer.Type() == avro.String {
			return
		}
	case avro.String:
		if writer.Type() == avro.Bytes {
			return
		}
	case avro.Union:
		for _, branch := range reader.(*avro.UnionSchema).Types() {
			if c.compatible(branch, writer) {
				return
			}
		}
		avroAdd(out, path, avroRuleMissingUnionType, "the reader's union has no branch that reads the writer's %s", avroTypeName(writer))
		return
	}
	avroAdd(out, path, avroRuleTypeMismatch, "the reader's %s cannot read the writer's %s", avroTypeName(reader), avroTypeName(writer))
}

// compatible reports whether reader reads writer, without reporting.
func (c *avroCompat) compatible(reader, writer avro.Schema) bool {
	c.trial++
	defer func() { c.trial-- }()
	var out []schema.Incompatibility
	c.check(reader, writer, "", &out)
	return len(out) == 0
}

func (c *avroCompat) record(r, w *avro.RecordSchema, path string, out *[]schema.Incompatibility) {
	p := avroPair{r, w}
	if c.active[p] {
		return
	}
	if ok, seen := c.done[p]; seen && (c.trial > 0 || c.reported[p]) {
		if !ok && c.trial > 0 {
			avroAdd(out, path, avroRuleTypeMismatch, "incompatible records")
		}
		return
	}
	c.active[p] = true
	before := len(*out)
	avroNames(r, w, path, out)
	writerFields := make(map[string]*avro.Field, len(w.Fields()))
	for _, f := range w.Fields() {
		writerFields[f.Name()] = f
	}
	for _, rf := range r.Fields() {
		fpath := path + "/fields/" + rf.Name()
		wf := writerFields[rf.Name()]
		if wf == nil {
			for _, alias := range rf.Aliases() {
				if wf = writerFields[alias]; wf != nil {
					break
				}
			}
		}
		if wf == nil {
			if !rf.HasDefault() {
				avroAdd(out, fpath, avroRuleMissingDefault, "the reader's field %q has no default and the writer's record %s does not have it", rf.Name(), w.FullName())
			}
			continue
		}
		c.check(rf.Type(), wf.Type(), fpath, out)
	}
	delete(c.active, p)
	c.done[p] = len(*out) == before
	if c.trial == 0 {
		c.reported[p] = true
	}
}

// avroNames checks that a reader's named type may read the writer's: same
// unqualified name, or a reader alias equal to the writer's full name.
func avroNames(r, w avro.NamedSchema, path string, out *[]schema.Incompatibility) {
	if r.Name() == w.Name() || slices.Contains(r.Aliases(), w.FullName()) {
		return
	}
	avroAdd(out, path+"/name", avroRuleNameMismatch, "the reader's %s is not named %s and has no alias for it", r.FullName(), w.FullName())
}

// avroSymbols checks that the reader's enum has every writer symbol, or a
// default to read the others as.
func avroSymbols(r, w *avro.EnumSchema, path string, out *[]schema.Incompatibility) {
	if r.HasDefault() {
		return
	}
	var missing []string
	for _, s := range w.Symbols() {
		if !slices.Contains(r.Symbols(), s) {
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return
	}
	sort.Strings(missing)
	avroAdd(out, path+"/symbols", avroRuleMissingSymbols, "the reader's enum %s lacks the writer's symbols [%s] and has no default", r.FullName(), strings.Join(missing, ", "))
}
