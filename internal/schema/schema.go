// Package schema is SemaQ's schema layer: the formats the registry accepts
// (JSON Schema, Avro, Protobuf), how a schema validates a payload, and when
// a new version is compatible with the old ones.
//
// A Format parses schema text into a Schema. A Schema validates payloads
// and has a canonical text (the registry's identity for "the same schema").
// Compatibility is decided per format by Format.Compatibility(reader,
// writer): the reasons data written with writer cannot be read with reader.
// The seven modes are built on that one question (mode.go), with the meaning
// Confluent Schema Registry gives them.
//
// This package holds what every format shares: the interfaces, the modes,
// the limits and the strict JSON pass that bounds a text before any
// compiler reads it. The formats live in their own packages (json, avro,
// protobuf, each importing this one), and package formats assembles them
// into the registry of built-in formats.
package schema

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Type names a schema format as Confluent's REST API spells it.
type Type string

const (
	TypeJSON     Type = "JSON"
	TypeAvro     Type = "AVRO"
	TypeProtobuf Type = "PROTOBUF"
)

// Reference is a named reference from one schema to a schema registered
// under another subject: a Protobuf import (Name is the import path) or a
// JSON Schema $ref (Name is the URI the $ref uses) or an Avro named type
// (Name is the full type name).
type Reference struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// Resolver returns the text and type of a referenced schema. The registry
// provides it; Parse calls it for each reference, transitively.
type Resolver func(ref Reference) (text string, typ Type, refs []Reference, err error)

// Format parses one kind of schema. Implementations are safe for concurrent
// use.
type Format interface {
	// Type is the format's name in the REST API.
	Type() Type
	// Parse compiles schema text. refs are the schema's references, which
	// resolve turns into text; resolve may be nil when refs is empty.
	// Errors describe what is wrong and where (line, path or field).
	Parse(text string, refs []Reference, resolve Resolver) (Schema, error)
	// Compatibility lists why data written with writer cannot be read with
	// reader; none means compatible. Both come from this format's Parse.
	Compatibility(reader, writer Schema) []Incompatibility
}

// Schema is a compiled schema. Implementations are immutable and safe for
// concurrent use.
type Schema interface {
	Type() Type
	// Canonical is a normalised text of the schema: two texts with the same
	// canonical form are the same schema (the registry gives them one id).
	Canonical() string
	// Validate checks one payload. For JSON Schema the payload is a JSON
	// document; for Avro it is the binary encoding of one datum; for
	// Protobuf it is Confluent's message-index list followed by the binary
	// message (the bytes after the magic byte and schema id). Errors are
	// *ValidationError.
	Validate(payload []byte) error
}

// Incompatibility is one reason a schema change breaks compatibility.
type Incompatibility struct {
	// Path locates the change: a JSON pointer (#/properties/age), an Avro
	// field path (/fields/age), a Protobuf element (Order.status).
	Path string `json:"path"`
	// Rule names what changed, in Confluent's vocabulary where it has one
	// (TYPE_CHANGED, REQUIRED_ATTRIBUTE_ADDED, FIELD_KIND_CHANGED...).
	Rule string `json:"rule"`
	// Message is a sentence for people.
	Message string `json:"message"`
}

func (i Incompatibility) String() string {
	return fmt.Sprintf("%s at %s: %s", i.Rule, i.Path, i.Message)
}

// ValidationError reports why a payload does not match its schema.
type ValidationError struct {
	// Path is where in the payload: a JSON pointer (/messages/0/role) or
	// a field path (request.messages[0].role).
	Path string
	// Rule is the schema keyword or check that failed (required, type,
	// enum, maxLength, decode...).
	Rule    string
	Message string
}

func (e *ValidationError) Error() string {
	path := e.Path
	if path == "" {
		path = "/"
	}
	return fmt.Sprintf("payload invalid at %s: %s (%s)", path, e.Message, e.Rule)
}

// Is makes every ValidationError match ErrInvalidPayload.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidPayload }

// Errors of the package.
var (
	// ErrInvalidPayload matches every *ValidationError.
	ErrInvalidPayload = errors.New("schema: payload does not match the schema")
	// ErrUnknownType is returned for a schema type no format handles.
	ErrUnknownType = errors.New("schema: unknown schema type")
)

// Formats holds the formats by type. The zero value is empty;
// formats.Default() has the built-in ones. A Formats is safe for concurrent use.
type Formats struct {
	mu sync.RWMutex
	m  map[Type]Format
}

// Register adds or replaces a format.
func (fs *Formats) Register(f Format) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.m == nil {
		fs.m = make(map[Type]Format)
	}
	fs.m[f.Type()] = f
}

// Get returns the format for t (any case). An empty type means Avro, as in
// Confluent's API, where schemaType is omitted for Avro.
func (fs *Formats) Get(t Type) (Format, error) {
	if t == "" {
		t = TypeAvro
	}
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	f, ok := fs.m[Type(strings.ToUpper(string(t)))]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownType, t, strings.Join(fs.typesLocked(), ", "))
	}
	return f, nil
}

// Types lists the registered types, sorted.
func (fs *Formats) Types() []string {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	return fs.typesLocked()
}

func (fs *Formats) typesLocked() []string {
	out := make([]string, 0, len(fs.m))
	for t := range fs.m {
		out = append(out, string(t))
	}
	sort.Strings(out)
	return out
}

// Clone returns an independent copy, for tests and embedders that add or
// replace formats without touching Default.
func (fs *Formats) Clone() *Formats {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	c := &Formats{m: make(map[Type]Format, len(fs.m))}
	for t, f := range fs.m {
		c.m[t] = f
	}
	return c
}

// Default is the registry of built-in formats that package formats fills
// when it is linked in (formats.Default returns it). It stays here for
// callers written against the single-package API; new code asks package
// formats, which makes sure the formats are there.
var Default = &Formats{}
