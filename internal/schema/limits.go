package schema

import (
	"errors"
	"fmt"
	"regexp/syntax"
)

// Limits bound what one schema may cost to compile and one payload to
// validate. The compilers (santhosh-tekuri/jsonschema, hamba/avro,
// protocompile) cannot be cancelled and some are superlinear (a JSON
// Schema nested 3,000 deep compiles for minutes), so every bound is
// checked on the text before a compiler sees it. Parse enforces them on
// every path: registration, and loading stored schemas at start-up.
//
// A zero field takes its default (DefaultLimits); docs/schema-registry.md
// lists them.
type Limits struct {
	// MaxSchemaBytes bounds the text of one schema, and the sum over a
	// schema and everything it references. Default 1 MiB.
	MaxSchemaBytes int
	// MaxDepth bounds nesting: JSON objects and arrays (JSON Schema,
	// Avro), braces, brackets and parentheses (Protobuf). Default 64.
	MaxDepth int
	// MaxNodes bounds the JSON values of a schema and its references (JSON
	// Schema, Avro), or its tokens (Protobuf): fields, types, keywords.
	// Default 10,000 (a JSON Schema of 48,000 values compiles for ~6 s).
	MaxNodes int
	// MaxPatterns bounds the regular expressions (pattern,
	// patternProperties) of a JSON Schema and its references. Default 256.
	MaxPatterns int
	// MaxPatternProgram bounds the size of those regular expressions
	// compiled (regexp/syntax instructions after simplification, which
	// expands counted repetitions), summed over the schema. Default 20,000.
	MaxPatternProgram int
	// MaxNumberLength bounds the characters of one number literal, in a
	// schema or a JSON payload, before it is converted to big.Rat.
	// Default 100.
	MaxNumberLength int
	// MaxNumberExponent bounds the exponent of one number literal (1e400
	// has 400), in a schema or a JSON payload. Default 400.
	MaxNumberExponent int
	// MaxValidationSteps bounds the schema nodes one JSON payload may make
	// the validator visit, plus 16 per value of the payload. A small
	// schema can apply one subschema many times to the same value
	// ($ref fan-out: 30 levels of allOf with two $refs each is 2^30
	// visits), so the count is taken before the work, and a payload past
	// it is refused. Default 1,000,000.
	MaxValidationSteps int
}

// DefaultLimits are the limits of a zero Limits.
var DefaultLimits = Limits{
	MaxSchemaBytes:     1 << 20,
	MaxDepth:           64,
	MaxNodes:           10_000,
	MaxPatterns:        256,
	MaxPatternProgram:  20_000,
	MaxNumberLength:    100,
	MaxNumberExponent:  400,
	MaxValidationSteps: 1_000_000,
}

// WithDefaults fills zero fields from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits
	pick := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	pick(&l.MaxSchemaBytes, d.MaxSchemaBytes)
	pick(&l.MaxDepth, d.MaxDepth)
	pick(&l.MaxNodes, d.MaxNodes)
	pick(&l.MaxPatterns, d.MaxPatterns)
	pick(&l.MaxPatternProgram, d.MaxPatternProgram)
	pick(&l.MaxNumberLength, d.MaxNumberLength)
	pick(&l.MaxNumberExponent, d.MaxNumberExponent)
	pick(&l.MaxValidationSteps, d.MaxValidationSteps)
	return l
}

// Validate refuses negative limits; zero means the default.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxSchemaBytes", l.MaxSchemaBytes}, {"MaxDepth", l.MaxDepth}, {"MaxNodes", l.MaxNodes},
		{"MaxPatterns", l.MaxPatterns}, {"MaxPatternProgram", l.MaxPatternProgram},
		{"MaxNumberLength", l.MaxNumberLength}, {"MaxNumberExponent", l.MaxNumberExponent},
		{"MaxValidationSteps", l.MaxValidationSteps},
	} {
		if f.v < 0 {
			return fmt.Errorf("schema: limit %s is %d: use 0 for the default or a positive bound", f.name, f.v)
		}
	}
	return nil
}

// ErrLimit matches every *LimitError.
var ErrLimit = errors.New("schema: limit exceeded")

// LimitError is a schema refused because it exceeds one of its Limits,
// before it was compiled.
type LimitError struct {
	// Limit is the Limits field exceeded (MaxDepth...).
	Limit string
	// Max is its value.
	Max int
	// Where locates the excess: a JSON pointer, a line, or "".
	Where   string
	Message string
}

func (e *LimitError) Error() string {
	s := "schema exceeds " + e.Limit + fmt.Sprintf(" (%d)", e.Max)
	if e.Where != "" {
		s += " at " + e.Where
	}
	return s + ": " + e.Message
}

// Is makes every LimitError match ErrLimit.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// LimitedFormat is a Format whose parsing bounds can be set. The built-in
// formats implement it.
type LimitedFormat interface {
	Format
	// WithLimits returns the format enforcing l (zero fields: defaults).
	WithLimits(l Limits) Format
}

// WithLimits returns a copy of fs in which every LimitedFormat enforces
// l. Other formats are kept as they are.
func (fs *Formats) WithLimits(l Limits) *Formats {
	c := fs.Clone()
	for t, f := range c.m {
		if lf, ok := f.(LimitedFormat); ok {
			c.m[t] = lf.WithLimits(l)
		}
	}
	return c
}

// Budget counts what one Parse has spent, over the schema and its
// references. The format packages charge it before any compiler sees a
// text; one Budget serves one Parse and is not safe for concurrent use.
type Budget struct {
	l        Limits
	bytes    int
	nodes    int
	patterns int
	program  int
}

// NewBudget returns an empty budget bounded by l (zero fields: defaults).
func NewBudget(l Limits) *Budget { return &Budget{l: l.WithDefaults()} }

// Limits returns the budget's bounds, defaults filled in.
func (b *Budget) Limits() Limits { return b.l }

// Node charges one value or token; false once MaxNodes is exceeded. The
// caller reports the LimitError, as it knows where it is.
func (b *Budget) Node() bool {
	b.nodes++
	return b.nodes <= b.l.MaxNodes
}

// Text charges one schema text (the main one or a reference).
func (b *Budget) Text(what string, n int) error {
	b.bytes += n
	if n > b.l.MaxSchemaBytes {
		return &LimitError{Limit: "MaxSchemaBytes", Max: b.l.MaxSchemaBytes, Message: fmt.Sprintf("%s has %d bytes", what, n)}
	}
	if b.bytes > b.l.MaxSchemaBytes {
		return &LimitError{Limit: "MaxSchemaBytes", Max: b.l.MaxSchemaBytes,
			Message: fmt.Sprintf("the schema and its references have %d bytes (at %s)", b.bytes, what)}
	}
	return nil
}

// Pattern checks one regular expression before any compiler sees it:
// its count, that it parses, and its compiled size. A pattern that does
// not parse is left for the compiler to report (it may use syntax the
// JSON Schema engine accepts and Go's parser does not).
func (b *Budget) Pattern(where, expr string) error {
	b.patterns++
	if b.patterns > b.l.MaxPatterns {
		return &LimitError{Limit: "MaxPatterns", Max: b.l.MaxPatterns, Where: where,
			Message: fmt.Sprintf("more than %d regular expressions (pattern, patternProperties)", b.l.MaxPatterns)}
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return nil
	}
	b.program += len(prog.Inst)
	if b.program > b.l.MaxPatternProgram {
		return &LimitError{Limit: "MaxPatternProgram", Max: b.l.MaxPatternProgram, Where: where,
			Message: fmt.Sprintf("the regular expressions compile to more than %d instructions (this one: %d); use fewer or smaller counted repetitions such as {1,900}", b.l.MaxPatternProgram, len(prog.Inst))}
	}
	return nil
}
