package formats

import (
	"slices"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

func TestBuiltinFormats(t *testing.T) {
	t.Parallel()
	want := []string{"AVRO", "JSON", "PROTOBUF"}
	for name, fs := range map[string]*schema.Formats{"Default": Default(), "New": New(), "schema.Default": schema.Default} {
		if got := fs.Types(); !slices.Equal(got, want) {
			t.Errorf("%s: types %v, want %v", name, got, want)
		}
		for _, typ := range []schema.Type{schema.TypeJSON, schema.TypeAvro, schema.TypeProtobuf, ""} {
			f, err := fs.Get(typ)
			if err != nil {
				t.Fatalf("%s: Get(%q): %v", name, typ, err)
			}
			if _, ok := f.(schema.LimitedFormat); !ok {
				t.Errorf("%s: %s format does not take limits", name, f.Type())
			}
		}
	}
	// New is a registry of its own.
	fs := New()
	fs.Register(otherFormat{})
	if _, err := Default().Get("OTHER"); err == nil {
		t.Fatal("registering in New() changed Default()")
	}
}

type otherFormat struct{ schema.Format }

func (otherFormat) Type() schema.Type { return "OTHER" }
