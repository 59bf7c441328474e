package avrofmt

import (
	"errors"
	"runtime"
	"testing"

	"github.com/hamba/avro/v2"

	"github.com/semaq/semaq/internal/schema"
)

// FuzzAvroSchemaParse feeds arbitrary text to the parser: it must never
// panic, and whatever it accepts must have a stable canonical form that
// parses again.
func FuzzAvroSchemaParse(f *testing.F) {
	for _, seed := range []string{
		`"int"`, `["null","string"]`, `{"type":"int","logicalType":"date"}`,
		avroRequestSchema,
		`{"type":"record","name":"N","namespace":"a.b","fields":[{"name":"next","type":["null","N"],"default":null}]}`,
		`{"type":"enum","name":"E","symbols":["A","B"],"default":"A","aliases":["F"]}`,
		`{"type":"fixed","name":"x.F","size":16,"logicalType":"decimal","precision":4}`,
		`{"type":"map","values":{"type":"array","items":"bytes"}}`,
		`{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"record","name":"S","namespace":"","fields":[]}},{"name":"b","type":"S"}]}`,
		`{"type":"record","name":"R","fields":[{"name":"a","type":"int","default":"x"}]}`,
		`{"type":`, `[[]]`, `{"type":"record","name":"R","fields":[{}]}`,
	} {
		f.Add(seed)
	}
	format := avroFormat{}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := format.Parse(text, nil, nil)
		if err != nil {
			return
		}
		again, err := format.Parse(s.Canonical(), nil, nil)
		if err != nil {
			t.Fatalf("canonical form %s does not parse: %v", s.Canonical(), err)
		}
		if again.Canonical() != s.Canonical() {
			t.Fatalf("canonical form is not stable:\n%s\n%s", s.Canonical(), again.Canonical())
		}
		_ = s.Validate([]byte(text)) // any schema, any bytes: no panic
		_ = format.Compatibility(s, again)
	})
}

// FuzzAvroValidate feeds arbitrary bytes to one record schema: Validate
// must never panic or allocate without bound, must fail only with a
// *ValidationError, and whatever it accepts hamba must decode too.
func FuzzAvroValidate(f *testing.F) {
	s, err := avroFormat{}.Parse(avroRequestSchema, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	good, err := avro.Marshal(s.(*avroSchema).schema, avroTestRequestValue())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0x02, 'm', 0x01, 0x08, 0x02, 0x04, 'h', 'i', 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x00})
	f.Add([]byte{0x02, 'm', 0xfe, 0xff, 0xff, 0xff, 0x0f})
	hamba := avro.Config{MaxByteSliceSize: 1 << 20, MaxSliceAllocSize: 1 << 16}.Freeze()
	f.Fuzz(func(t *testing.T, payload []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		err := s.Validate(payload)
		runtime.ReadMemStats(&after)
		// Process-wide, so generous; a hostile length prefix honoured would
		// allocate far more.
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Fatalf("Validate of %d bytes allocated %d bytes", len(payload), n)
		}
		if err != nil {
			var ve *schema.ValidationError
			if !errors.As(err, &ve) || ve.Rule == "" || ve.Message == "" {
				t.Fatalf("error %#v is not a complete *ValidationError", err)
			}
			return
		}
		var v any
		if err := hamba.Unmarshal(s.(*avroSchema).schema, payload, &v); err != nil {
			t.Fatalf("the walker accepts %x but hamba does not: %v", payload, err)
		}
	})
}
