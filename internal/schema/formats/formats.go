// Package formats assembles SemaQ's built-in schema formats, each in its
// own package behind schema.Format (jsonfmt, avrofmt, protofmt), into the
// registry the schema registry, the broker and the CLI use. It sits above
// the format packages so that none of them imports another, and package
// schema imports none of them.
package formats

import (
	"github.com/semaq/semaq/internal/schema"
	avrofmt "github.com/semaq/semaq/internal/schema/avro"
	jsonfmt "github.com/semaq/semaq/internal/schema/json"
	protofmt "github.com/semaq/semaq/internal/schema/protobuf"
)

// schema.Default keeps working for callers of the single-package API: it
// holds the built-in formats as soon as this package is linked in.
func init() { register(schema.Default) }

func register(fs *schema.Formats) {
	fs.Register(jsonfmt.New())
	fs.Register(avrofmt.New())
	fs.Register(protofmt.New())
}

// Default returns the process-wide registry of the built-in formats (it
// is schema.Default). Clone it, or use New, for a registry to change
// without touching everyone else's.
func Default() *schema.Formats { return schema.Default }

// New returns a registry of its own holding the built-in formats.
func New() *schema.Formats {
	fs := &schema.Formats{}
	register(fs)
	return fs
}
