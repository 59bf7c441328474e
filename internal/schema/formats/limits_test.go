package formats

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/schema"
	avrofmt "github.com/semaq/semaq/internal/schema/avro"
	jsonfmt "github.com/semaq/semaq/internal/schema/json"
	protofmt "github.com/semaq/semaq/internal/schema/protobuf"
)

// bounded runs fn and fails the test if it has not returned within a
// generous bound: a hang detector for the compilers, which cannot be
// cancelled, not a performance assertion.
func bounded[T any](t *testing.T, fn func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- fn() }()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case v := <-done:
		return v
	case <-timer.C:
		t.Fatal("did not return within 10 s: the limit was not checked before compiling")
		panic("unreachable")
	}
}

func parseBounded(t *testing.T, f schema.Format, text string, refs []schema.Reference, resolve schema.Resolver) error {
	t.Helper()
	return bounded(t, func() error {
		_, err := f.Parse(text, refs, resolve)
		return err
	})
}

// wantLimit fails unless err is a *LimitError for limit.
func wantLimit(t *testing.T, err error, limit string) {
	t.Helper()
	var le *schema.LimitError
	if !errors.As(err, &le) || !errors.Is(err, schema.ErrLimit) {
		t.Fatalf("error %v, want a LimitError (%s)", err, limit)
	}
	if le.Limit != limit {
		t.Fatalf("error %v, want limit %s", err, limit)
	}
}

func jsonDeep(n int) string {
	return strings.Repeat(`{"properties":{"a":`, n) + `{"type":"string"}` + strings.Repeat(`}}`, n)
}

func avroDeep(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"type":"record","name":"R%d","fields":[{"name":"f","type":`, i)
	}
	b.WriteString(`"int"`)
	b.WriteString(strings.Repeat(`}]}`, n))
	return b.String()
}

func protoDeep(n int) string {
	var b strings.Builder
	b.WriteString("syntax = \"proto3\";\n")
	for i := range n {
		fmt.Fprintf(&b, "message M%d {\n", i)
	}
	b.WriteString(strings.Repeat("}\n", n))
	return b.String()
}

func patternProps(n int, re string) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","patternProperties":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"^x%d%s$":{"type":"string"}`, i, re)
	}
	b.WriteString(`}}`)
	return b.String()
}

func TestHostileSchemaDepth(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		f    schema.Format
		text string
	}{
		{"json 3000 deep (147 KB)", jsonfmt.New(), jsonDeep(3000)},
		{"json 33 schema levels", jsonfmt.New(), jsonDeep(33)},
		{"json deep allOf arrays", jsonfmt.New(), strings.Repeat(`{"allOf":[`, 500) + `true` + strings.Repeat(`]}`, 500)},
		{"json deep const value", jsonfmt.New(), `{"const":` + strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000) + `}`},
		{"avro 3000 nested records", avrofmt.New(), avroDeep(3000)},
		{"avro 22 nested records", avrofmt.New(), avroDeep(22)},
		{"protobuf 3000 nested messages", protofmt.New(), protoDeep(3000)},
		{"protobuf deep option literal", protofmt.New(), "syntax = \"proto3\";\nimport \"google/protobuf/descriptor.proto\";\nmessage M { option (x) = " +
			strings.Repeat("{a:", 3000) + "1" + strings.Repeat("}", 3000) + "; }"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := parseBounded(t, tc.f, tc.text, nil, nil)
			wantLimit(t, err, "MaxDepth")
			if !strings.Contains(err.Error(), "nested more than 64 levels deep") {
				t.Fatalf("error %q does not say what is wrong", err)
			}
		})
	}
}

func TestHostileSchemaPatterns(t *testing.T) {
	t.Parallel()
	refDoc := patternProps(12, "[0-9]{1,900}")
	cases := []struct {
		name, text, limit string
		refs              []schema.Reference
	}{
		{"3000 patternProperties [0-9]{1,900}", patternProps(3000, "[0-9]{1,900}"), "MaxPatternProgram", nil},
		{"257 small patterns", patternProps(257, "[a-z]"), "MaxPatterns", nil},
		{"12 patternProperties [0-9]{1,900}", patternProps(12, "[0-9]{1,900}"), "MaxPatternProgram", nil},
		{"one huge nested pattern", `{"properties":{"a":{"items":{"type":"string","pattern":"` + strings.Repeat("[a-z]{1,1000}", 11) + `"}}}}`, "MaxPatternProgram", nil},
		{"patterns in a reference", `{"$ref":"r.json"}`, "MaxPatternProgram", []schema.Reference{{Name: "r.json", Subject: "r", Version: 1}}},
	}
	resolve := func(schema.Reference) (string, schema.Type, []schema.Reference, error) {
		return refDoc, schema.TypeJSON, nil, nil
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantLimit(t, parseBounded(t, jsonfmt.New(), tc.text, tc.refs, resolve), tc.limit)
		})
	}
}

func TestHostileSchemaSize(t *testing.T) {
	t.Parallel()
	big := `{"description":"` + strings.Repeat("x", 1<<20) + `"}`
	wide := `{"enum":[` + strings.Repeat(`1,`, 10_000) + `1]}`
	var fields strings.Builder
	for i := range 5_000 {
		fmt.Fprintf(&fields, `{"name":"f%d","type":"int"},`, i)
	}
	manyFields := `{"type":"record","name":"R","fields":[` + fields.String() + `{"name":"g","type":"int"}]}`
	manyProto := "syntax = \"proto3\";\nmessage M {\n" + strings.Repeat("int32 f = 1;\n", 30_000) + "}\n"
	cases := []struct {
		name  string
		f     schema.Format
		text  string
		limit string
	}{
		{"json over 1 MiB", jsonfmt.New(), big, "MaxSchemaBytes"},
		{"avro over 1 MiB", avrofmt.New(), big, "MaxSchemaBytes"},
		{"protobuf over 1 MiB", protofmt.New(), "syntax = \"proto3\";//" + strings.Repeat("x", 1<<20), "MaxSchemaBytes"},
		{"json 10001 values", jsonfmt.New(), wide, "MaxNodes"},
		{"avro 5001 fields", avrofmt.New(), manyFields, "MaxNodes"},
		{"protobuf 30000 fields", protofmt.New(), manyProto, "MaxNodes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantLimit(t, parseBounded(t, tc.f, tc.text, nil, nil), tc.limit)
		})
	}
	t.Run("references add up", func(t *testing.T) {
		t.Parallel()
		half := `{"description":"` + strings.Repeat("x", 600<<10) + `"}`
		resolve := func(schema.Reference) (string, schema.Type, []schema.Reference, error) {
			return half, schema.TypeJSON, nil, nil
		}
		err := parseBounded(t, jsonfmt.New(), half, []schema.Reference{{Name: "r.json", Subject: "r", Version: 1}}, resolve)
		wantLimit(t, err, "MaxSchemaBytes")
	})
}

func TestHostileSchemaNumbers(t *testing.T) {
	t.Parallel()
	for _, text := range []string{`{"type":"number","minimum":1e999999}`, `{"multipleOf":` + strings.Repeat("1", 200) + `}`,
		`{"type":"record","name":"R","fields":[{"name":"a","type":"double","default":1e-99999999999}]}`} {
		f := schema.Format(jsonfmt.New())
		if strings.Contains(text, "record") {
			f = avrofmt.New()
		}
		err := parseBounded(t, f, text, nil, nil)
		var le *schema.LimitError
		if !errors.As(err, &le) || !strings.HasPrefix(le.Limit, "MaxNumber") {
			t.Errorf("%.60s: error %v, want a MaxNumber* LimitError", text, err)
		}
	}
}

// The payload scanner refuses huge number literals before the validator
// turns them into big.Rat: an array of 1e999999 took seconds of CPU.
func TestHostilePayloadNumbers(t *testing.T) {
	t.Parallel()
	s := jsonTestParse(t, `{"type":"array","items":{"type":"integer"}}`)
	obj := jsonTestParse(t, `{"type":"object","properties":{"n":{"type":"number","multipleOf":0.5}}}`)
	cases := []struct {
		name, payload, rule, path string
		schema                    schema.Schema
	}{
		{"902 bytes of 1e999999", "[" + strings.TrimSuffix(strings.Repeat("1e999999,", 100), ",") + "]", "MaxNumberExponent", "/0", s},
		{"9 KB of 1e999999", "[" + strings.TrimSuffix(strings.Repeat("1e999999,", 1000), ",") + "]", "MaxNumberExponent", "/0", s},
		{"negative exponent", `[1, 2, 1E-9999999]`, "MaxNumberExponent", "/2", s},
		{"exponent overflowing int", `[1e99999999999999999999999]`, "MaxNumberExponent", "/0", s},
		{"1000 digits", `{"n":` + strings.Repeat("7", 1000) + `}`, "MaxNumberLength", "/n", obj},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := bounded(t, func() error { return tc.schema.Validate([]byte(tc.payload)) })
			var verr *schema.ValidationError
			if !errors.As(err, &verr) || verr.Rule != tc.rule || verr.Path != tc.path {
				t.Fatalf("error %v, want a ValidationError %s at %s", err, tc.rule, tc.path)
			}
			if !strings.Contains(err.Error(), "refused before validation") {
				t.Fatalf("error %q does not say it was refused", err)
			}
		})
	}
	// Within the limits numbers still validate as before.
	if err := s.Validate([]byte(`[1, 1e2, 123456789012345678901234567890, 1e300]`)); err != nil {
		t.Fatalf("ordinary numbers refused: %v", err)
	}
}

func TestDuplicateKeysRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, text, key, path string
		f                     schema.Format
	}{
		{"json root", `{"type":"string","type":"object"}`, "type", "/", jsonfmt.New()},
		{"json nested", `{"properties":{"a":{"type":"string","maxLength":3,"maxLength":300}}}`, "maxLength", "/properties/a", jsonfmt.New()},
		{"json escaped spelling", `{"type":"string","t\u0079pe":"object"}`, "type", "/", jsonfmt.New()},
		{"json property names", `{"properties":{"a":{},"a":{"type":"string"}}}`, "a", "/properties", jsonfmt.New()},
		{"avro field", `{"type":"record","name":"R","fields":[{"name":"a","type":"int","type":"string"}]}`, "type", "/fields/0", avrofmt.New()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := parseBounded(t, tc.f, tc.text, nil, nil)
			var de *schema.DuplicateKeyError
			if !errors.As(err, &de) || de.Key != tc.key {
				t.Fatalf("error %v, want duplicate key %q", err, tc.key)
			}
			if want := fmt.Sprintf("duplicate key %q at %s", tc.key, tc.path); !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q, want it to say %q", err, want)
			}
		})
	}
	// Keys that differ in case are distinct schema keywords and properties.
	if _, err := jsonfmt.New().Parse(`{"properties":{"name":{},"Name":{}}}`, nil, nil); err != nil {
		t.Fatalf("case-variant property names refused: %v", err)
	}
}

func TestLimitsWithinDefaults(t *testing.T) {
	t.Parallel()
	var props strings.Builder
	for i := range 3_000 {
		fmt.Fprintf(&props, `"p%d":{"type":"string"},`, i)
	}
	ok := []struct {
		f    schema.Format
		text string
	}{
		{jsonfmt.New(), jsonDeep(30)},
		{jsonfmt.New(), patternProps(50, "[a-z0-9_]{1,64}")},
		{avrofmt.New(), avroDeep(10)},
		{protofmt.New(), protoDeep(30)},
		{jsonfmt.New(), `{"type":"object","properties":{` + props.String() + `"last":{}}}`}, // 9,000 values
	}
	for i, tc := range ok {
		if err := parseBounded(t, tc.f, tc.text, nil, nil); err != nil {
			t.Errorf("case %d: %v", i, err)
		}
	}
	// Limits are configurable, through Formats.WithLimits too.
	fs := Default().WithLimits(schema.Limits{MaxDepth: 10})
	f, err := fs.Get(schema.TypeJSON)
	if err != nil {
		t.Fatal(err)
	}
	wantLimit(t, parseBounded(t, f, jsonDeep(5), nil, nil), "MaxDepth")
	if _, err := jsonfmt.New().Parse(jsonDeep(5), nil, nil); err != nil {
		t.Fatalf("Default changed by WithLimits: %v", err)
	}
	if err := (schema.Limits{MaxDepth: -1}).Validate(); err == nil {
		t.Fatal("negative limit accepted")
	}
}

// jsonTestParse compiles a JSON Schema with the default limits.
func jsonTestParse(t testing.TB, text string) schema.Schema {
	t.Helper()
	s, err := jsonfmt.New().Parse(text, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
