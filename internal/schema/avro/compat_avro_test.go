package avrofmt

import (
	"fmt"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

// avroRecord builds the JSON of record R with the given field JSONs.
func avroTestRecord(fields ...string) string {
	return `{"type":"record","name":"R","namespace":"test","fields":[` + strings.Join(fields, ",") + `]}`
}

func avroTestField(name, typ string) string { return fmt.Sprintf(`{"name":%q,"type":%s}`, name, typ) }

func avroMustParse(t testing.TB, text string) schema.Schema {
	t.Helper()
	s, err := avroFormat{}.Parse(text, nil, nil)
	if err != nil {
		t.Fatalf("parse %s: %v", text, err)
	}
	return s
}

func TestAvroCompatibility(t *testing.T) {
	t.Parallel()
	const (
		enumABC  = `{"type":"enum","name":"E","symbols":["A","B","C"]}`
		enumAB   = `{"type":"enum","name":"E","symbols":["A","B"]}`
		enumABD  = `{"type":"enum","name":"E","symbols":["A","B"],"default":"A"}`
		fixed16  = `{"type":"fixed","name":"F","size":16}`
		fixed8   = `{"type":"fixed","name":"F","size":8}`
		address  = `{"type":"record","name":"Address","fields":[{"name":"street","type":"string"}]}`
		address2 = `{"type":"record","name":"Address","fields":[{"name":"street","type":"string"},{"name":"zip","type":"string"}]}`
		list     = `{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"],"default":null}]}`
		listLong = `{"type":"record","name":"Node","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","Node"],"default":null}]}`
		listTag  = `{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"tag","type":"string"},{"name":"next","type":["null","Node"],"default":null}]}`
	)
	// Each case: can reader read data written with writer? want lists the
	// expected "RULE path" reasons, none for compatible.
	cases := []struct {
		name           string
		reader, writer string
		want           []string
	}{
		{"identical records", avroTestRecord(avroTestField("a", `"int"`)), avroTestRecord(avroTestField("a", `"int"`)), nil},
		{"writer field unknown to reader is ignored", avroTestRecord(avroTestField("a", `"int"`)), avroTestRecord(avroTestField("a", `"int"`), avroTestField("b", `"string"`)), nil},
		{"reader field with default", avroTestRecord(avroTestField("a", `"int"`), `{"name":"b","type":"string","default":"x"}`), avroTestRecord(avroTestField("a", `"int"`)), nil},
		{"reader field without default", avroTestRecord(avroTestField("a", `"int"`), avroTestField("age", `"int"`)), avroTestRecord(avroTestField("a", `"int"`)),
			[]string{"READER_FIELD_MISSING_DEFAULT_VALUE /fields/age"}},
		{"reader field alias finds renamed writer field", avroTestRecord(`{"name":"age","type":"int","aliases":["years"]}`), avroTestRecord(avroTestField("years", `"int"`)), nil},
		{"int promotes to long", avroTestRecord(avroTestField("a", `"long"`)), avroTestRecord(avroTestField("a", `"int"`)), nil},
		{"int promotes to float", avroTestRecord(avroTestField("a", `"float"`)), avroTestRecord(avroTestField("a", `"int"`)), nil},
		{"int promotes to double", avroTestRecord(avroTestField("a", `"double"`)), avroTestRecord(avroTestField("a", `"int"`)), nil},
		{"long promotes to float", avroTestRecord(avroTestField("a", `"float"`)), avroTestRecord(avroTestField("a", `"long"`)), nil},
		{"long promotes to double", avroTestRecord(avroTestField("a", `"double"`)), avroTestRecord(avroTestField("a", `"long"`)), nil},
		{"float promotes to double", avroTestRecord(avroTestField("a", `"double"`)), avroTestRecord(avroTestField("a", `"float"`)), nil},
		{"long does not narrow to int", avroTestRecord(avroTestField("a", `"int"`)), avroTestRecord(avroTestField("a", `"long"`)),
			[]string{"TYPE_MISMATCH /fields/a"}},
		{"double does not narrow to float", avroTestRecord(avroTestField("a", `"float"`)), avroTestRecord(avroTestField("a", `"double"`)),
			[]string{"TYPE_MISMATCH /fields/a"}},
		{"string reads bytes", avroTestRecord(avroTestField("a", `"string"`)), avroTestRecord(avroTestField("a", `"bytes"`)), nil},
		{"bytes reads string", avroTestRecord(avroTestField("a", `"bytes"`)), avroTestRecord(avroTestField("a", `"string"`)), nil},
		{"string does not read int", avroTestRecord(avroTestField("a", `"int"`)), avroTestRecord(avroTestField("a", `"string"`)),
			[]string{"TYPE_MISMATCH /fields/a"}},
		{"logical types are ignored", avroTestRecord(avroTestField("a", `{"type":"long","logicalType":"timestamp-millis"}`)), avroTestRecord(avroTestField("a", `"long"`)), nil},
		{"record does not read array", `{"type":"array","items":"int"}`, avroTestRecord(), []string{"TYPE_MISMATCH /"}},
		{"enum gains a symbol", avroTestRecord(avroTestField("e", enumABC)), avroTestRecord(avroTestField("e", enumAB)), nil},
		{"enum loses a symbol", avroTestRecord(avroTestField("e", enumAB)), avroTestRecord(avroTestField("e", enumABC)),
			[]string{"MISSING_ENUM_SYMBOLS /fields/e/symbols"}},
		{"enum with default reads unknown symbols", avroTestRecord(avroTestField("e", enumABD)), avroTestRecord(avroTestField("e", enumABC)), nil},
		{"fixed of the same size", avroTestRecord(avroTestField("f", fixed16)), avroTestRecord(avroTestField("f", fixed16)), nil},
		{"fixed of another size", avroTestRecord(avroTestField("f", fixed8)), avroTestRecord(avroTestField("f", fixed16)),
			[]string{"FIXED_SIZE_MISMATCH /fields/f/size"}},
		{"record renamed", `{"type":"record","name":"S","namespace":"test","fields":[]}`, avroTestRecord(),
			[]string{"NAME_MISMATCH /name"}},
		{"record renamed with alias", `{"type":"record","name":"S","namespace":"test","aliases":["R"],"fields":[]}`, avroTestRecord(), nil},
		{"namespace change alone is compatible", `{"type":"record","name":"R","namespace":"other","fields":[]}`, avroTestRecord(), nil},
		{"enum renamed", avroTestRecord(avroTestField("e", `{"type":"enum","name":"G","symbols":["A","B"]}`)), avroTestRecord(avroTestField("e", enumAB)),
			[]string{"NAME_MISMATCH /fields/e/name"}},
		{"reader union covers writer union", avroTestRecord(avroTestField("u", `["null","string","int"]`)), avroTestRecord(avroTestField("u", `["null","string"]`)), nil},
		{"reader union lacks a writer branch", avroTestRecord(avroTestField("u", `["null","int"]`)), avroTestRecord(avroTestField("u", `["null","string"]`)),
			[]string{"MISSING_UNION_BRANCH /fields/u/1"}},
		{"reader union has the writer type", avroTestRecord(avroTestField("u", `["null","string"]`)), avroTestRecord(avroTestField("u", `"string"`)), nil},
		{"reader union branch promotes the writer type", avroTestRecord(avroTestField("u", `["null","long"]`)), avroTestRecord(avroTestField("u", `"int"`)), nil},
		{"reader union lacks the writer type", avroTestRecord(avroTestField("u", `["null","string"]`)), avroTestRecord(avroTestField("u", `"int"`)),
			[]string{"MISSING_UNION_BRANCH /fields/u"}},
		{"reader reads every writer union branch", avroTestRecord(avroTestField("u", `"double"`)), avroTestRecord(avroTestField("u", `["int","long","float"]`)), nil},
		{"reader cannot read a writer union branch", avroTestRecord(avroTestField("u", `"long"`)), avroTestRecord(avroTestField("u", `["null","int"]`)),
			[]string{"TYPE_MISMATCH /fields/u"}},
		{"array items promote", avroTestRecord(avroTestField("a", `{"type":"array","items":"long"}`)), avroTestRecord(avroTestField("a", `{"type":"array","items":"int"}`)), nil},
		{"array items narrow", avroTestRecord(avroTestField("a", `{"type":"array","items":"int"}`)), avroTestRecord(avroTestField("a", `{"type":"array","items":"long"}`)),
			[]string{"TYPE_MISMATCH /fields/a/items"}},
		{"map values promote", avroTestRecord(avroTestField("m", `{"type":"map","values":"double"}`)), avroTestRecord(avroTestField("m", `{"type":"map","values":"float"}`)), nil},
		{"map values change", avroTestRecord(avroTestField("m", `{"type":"map","values":"boolean"}`)), avroTestRecord(avroTestField("m", `{"type":"map","values":"string"}`)),
			[]string{"TYPE_MISMATCH /fields/m/values"}},
		{"nested record gains a field with no default", avroTestRecord(avroTestField("address", address2)), avroTestRecord(avroTestField("address", address)),
			[]string{"READER_FIELD_MISSING_DEFAULT_VALUE /fields/address/fields/zip"}},
		{"nested record loses a field", avroTestRecord(avroTestField("address", address)), avroTestRecord(avroTestField("address", address2)), nil},
		{"recursive record", avroTestRecord(avroTestField("head", listLong)), avroTestRecord(avroTestField("head", list)), nil},
		{"recursive record gains a field with no default", avroTestRecord(avroTestField("head", listTag)), avroTestRecord(avroTestField("head", list)),
			[]string{"READER_FIELD_MISSING_DEFAULT_VALUE /fields/head/fields/tag"}},
		{"every reason is listed", avroTestRecord(avroTestField("a", `"int"`), avroTestField("b", `"int"`), avroTestField("c", `"int"`)), avroTestRecord(avroTestField("a", `"string"`), avroTestField("b", `"int"`)),
			[]string{"TYPE_MISMATCH /fields/a", "READER_FIELD_MISSING_DEFAULT_VALUE /fields/c"}},
		{"null reads null", `"null"`, `"null"`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reader, writer := avroMustParse(t, tc.reader), avroMustParse(t, tc.writer)
			var got []string
			for _, r := range (avroFormat{}).Compatibility(reader, writer) {
				if r.Message == "" {
					t.Errorf("%s has no message", r)
				}
				got = append(got, r.Rule+" "+r.Path)
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The union's recursion must end even when the reader's union needs a
// trial check of the very records being compared.
func TestAvroCompatibilityMutualRecursion(t *testing.T) {
	t.Parallel()
	tree := func(valueType string) string {
		return `{"type":"record","name":"Tree","fields":[{"name":"value","type":"` + valueType + `"},` +
			`{"name":"children","type":{"type":"array","items":["null","Tree"]}},` +
			`{"name":"left","type":["null",{"type":"record","name":"Leaf","fields":[{"name":"up","type":["null","Tree"]}]}]}]}`
	}
	f := avroFormat{}
	if got := f.Compatibility(avroMustParse(t, tree("long")), avroMustParse(t, tree("int"))); len(got) != 0 {
		t.Errorf("widening the value: %v", got)
	}
	got := f.Compatibility(avroMustParse(t, tree("int")), avroMustParse(t, tree("long")))
	if len(got) != 1 || got[0].Rule != "TYPE_MISMATCH" || got[0].Path != "/fields/value" {
		t.Errorf("narrowing the value: got %v, want one TYPE_MISMATCH at /fields/value", got)
	}
}

func TestAvroCompatibilityOtherFormat(t *testing.T) {
	t.Parallel()
	got := avroFormat{}.Compatibility(avroMustParse(t, `"int"`), avroOtherSchema{})
	if len(got) != 1 || got[0].Rule != "TYPE_MISMATCH" {
		t.Errorf("got %v, want one TYPE_MISMATCH", got)
	}
}

type avroOtherSchema struct{}

func (avroOtherSchema) Type() schema.Type       { return schema.TypeJSON }
func (avroOtherSchema) Canonical() string       { return "{}" }
func (avroOtherSchema) Validate(_ []byte) error { return nil }

// TestAvroCheckModes runs schema.Check under every mode on histories where
// checking only the latest version and checking all of them disagree.
func TestAvroCheckModes(t *testing.T) {
	t.Parallel()
	var (
		a        = avroTestField("a", `"int"`)
		bDefault = `{"name":"b","type":"int","default":0}`
		b        = avroTestField("b", `"int"`)
	)
	type outcome map[schema.Mode]bool // mode → compatible
	scenarios := []struct {
		name      string
		history   []string // oldest first
		candidate string
		want      outcome
		// failVersion is the 1-based version the transitive failures name.
		failVersion int
	}{
		{
			// v3 needs b, which v2 wrote but v1 did not.
			name:      "reader adds a required field the latest writer has",
			history:   []string{avroTestRecord(a), avroTestRecord(a, bDefault)},
			candidate: avroTestRecord(a, b),
			want: outcome{schema.Backward: true, schema.BackwardTransitive: false, schema.Forward: true, schema.ForwardTransitive: true,
				schema.Full: true, schema.FullTransitive: false, schema.None: true},
			failVersion: 1,
		},
		{
			// v3 drops b: v2 reads that with its default, v1 cannot.
			name:      "writer drops a field only the latest reader defaults",
			history:   []string{avroTestRecord(a, b), avroTestRecord(a, bDefault)},
			candidate: avroTestRecord(a),
			want: outcome{schema.Backward: true, schema.BackwardTransitive: true, schema.Forward: true, schema.ForwardTransitive: false,
				schema.Full: true, schema.FullTransitive: false, schema.None: true},
			failVersion: 1,
		},
		{
			// int → long widens: the new schema reads old data, not back.
			name:      "widening a field",
			history:   []string{avroTestRecord(a)},
			candidate: avroTestRecord(avroTestField("a", `"long"`)),
			want: outcome{schema.Backward: true, schema.BackwardTransitive: true, schema.Forward: false, schema.ForwardTransitive: false,
				schema.Full: false, schema.FullTransitive: false, schema.None: true},
			failVersion: 1,
		},
	}
	f := avroFormat{}
	for _, sc := range scenarios {
		var history []schema.Schema
		for _, h := range sc.history {
			history = append(history, avroMustParse(t, h))
		}
		candidate := avroMustParse(t, sc.candidate)
		for _, mode := range schema.Modes {
			t.Run(sc.name+"/"+string(mode), func(t *testing.T) {
				got := schema.Check(f, mode, candidate, history)
				if compatible := len(got) == 0; compatible != sc.want[mode] {
					t.Fatalf("compatible = %v, want %v (reasons %v)", compatible, sc.want[mode], got)
				}
				for _, r := range got {
					if !strings.Contains(r.Message, fmt.Sprintf("version %d", sc.failVersion)) {
						t.Errorf("reason %q does not name version %d", r, sc.failVersion)
					}
				}
			})
		}
	}
}
