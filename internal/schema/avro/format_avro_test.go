package avrofmt

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"

	"github.com/semaq/semaq/internal/schema"
)

// avroRequestSchema is an inference request, the payload the benchmark and
// the validation tests use.
const avroRequestSchema = `{
  "type": "record", "name": "InferenceRequest", "namespace": "ai.semaq",
  "fields": [
    {"name": "model", "type": "string"},
    {"name": "messages", "type": {"type": "array", "items": {
      "type": "record", "name": "Message", "fields": [
        {"name": "role", "type": {"type": "enum", "name": "Role", "symbols": ["system", "user", "assistant", "tool"]}},
        {"name": "content", "type": "string"}
      ]}}},
    {"name": "max_tokens", "type": ["null", "int"], "default": null},
    {"name": "temperature", "type": "double", "default": 1.0},
    {"name": "metadata", "type": {"type": "map", "values": "string"}, "default": {}}
  ]
}`

type avroTestMessage struct {
	Role    string `avro:"role"`
	Content string `avro:"content"`
}

type avroTestRequest struct {
	Model       string            `avro:"model"`
	Messages    []avroTestMessage `avro:"messages"`
	MaxTokens   *int              `avro:"max_tokens"`
	Temperature float64           `avro:"temperature"`
	Metadata    map[string]string `avro:"metadata"`
}

func avroTestRequestValue() avroTestRequest {
	maxTokens := 512
	return avroTestRequest{
		Model: "llama-3.1-70b-instruct",
		Messages: []avroTestMessage{
			{Role: "system", Content: "You are a concise assistant. Answer in one short paragraph."},
			{Role: "user", Content: "Summarise the trade-offs between at-least-once and exactly-once delivery in a message broker, for an engineer choosing one."},
			{Role: "assistant", Content: "Sure."},
		},
		MaxTokens:   &maxTokens,
		Temperature: 0.2,
		Metadata:    map[string]string{"tenant": "acme", "trace": "4bf92f3577b34da6"},
	}
}

// avroEncode encodes v with hamba against a parsed schema.
func avroEncode(t testing.TB, s schema.Schema, v any) []byte {
	t.Helper()
	b, err := avro.Marshal(s.(*avroSchema).schema, v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

func TestAvroRegistered(t *testing.T) {
	t.Parallel()
	fs := &schema.Formats{}
	fs.Register(New())
	for _, name := range []schema.Type{"", "avro", "AVRO"} {
		f, err := fs.Get(name)
		if err != nil {
			t.Fatalf("Get(%q): %v", name, err)
		}
		if f.Type() != schema.TypeAvro {
			t.Errorf("Get(%q).Type() = %s", name, f.Type())
		}
	}
}

func TestAvroParse(t *testing.T) {
	t.Parallel()
	valid := map[string]string{
		"primitive":        `"string"`,
		"primitive object": `{"type":"long","logicalType":"timestamp-millis"}`,
		"request":          avroRequestSchema,
		"every type": `{"type":"record","name":"All","namespace":"a.b","doc":"all of them","fields":[
			{"name":"n","type":"null"},
			{"name":"b","type":"boolean","default":true},
			{"name":"i","type":"int","default":-1},
			{"name":"l","type":"long","order":"descending"},
			{"name":"f","type":"float"},
			{"name":"d","type":"double"},
			{"name":"by","type":"bytes","default":"\u00ff"},
			{"name":"s","type":"string","aliases":["str"]},
			{"name":"e","type":{"type":"enum","name":"E","symbols":["X","Y"],"default":"X"}},
			{"name":"fx","type":{"type":"fixed","name":"c.Hash","size":32}},
			{"name":"fx2","type":"c.Hash"},
			{"name":"a","type":{"type":"array","items":"E"}},
			{"name":"m","type":{"type":"map","values":["null","a.b.E"]}},
			{"name":"u","type":["null","string",{"type":"record","name":"Inner","fields":[]}],"default":null},
			{"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
			{"name":"uuid","type":{"type":"string","logicalType":"uuid"}},
			{"name":"date","type":{"type":"int","logicalType":"date"}},
			{"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}}
		]}`,
		"custom property in another case": `{"type":"record","name":"R","fields":[{"name":"a","type":"int","Default":"x","DOC":5}]}`,
		"recursive":                       `{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}`,
		"error type":                      `{"type":"error","name":"Oops","fields":[{"name":"why","type":"string"}]}`,
		"named by type":                   `{"type":"record","name":"R","fields":[{"name":"a","type":{"type":"fixed","name":"F","size":2}},{"name":"b","type":{"type":"F"}}]}`,
	}
	for name, text := range valid {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := avroMustParse(t, text)
			if s.Type() != schema.TypeAvro {
				t.Errorf("Type() = %s", s.Type())
			}
			// The canonical text is itself a schema, with the same form.
			again := avroMustParse(t, s.Canonical())
			if again.Canonical() != s.Canonical() {
				t.Errorf("canonical form is not stable:\n%s\n%s", s.Canonical(), again.Canonical())
			}
		})
	}
}

func TestAvroParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, text, want string }{
		{"empty", "  ", "empty"},
		{"not json", `{"type": "record",`, "not valid JSON"},
		{"json syntax located", "{\n  \"type\": \"record\"\n  \"name\": \"R\"}", "line 3, column 3"},
		{"text after", "\"int\"\n \"long\"", "line 2, column 2: text after the schema"},
		{"bare name not json", `string`, "not valid JSON"},
		{"number", `42`, "not a number"},
		{"no type", `{"name":"R"}`, `no "type"`},
		{"type not string", `{"type":5}`, `"type" must be a string`},
		{"union as type", `{"type":["null","int"]}`, "bare JSON array"},
		{"unknown type", avroTestRecord(avroTestField("a", `"Adress"`)), `at /fields/a: unknown type "test.Adress"`},
		{"keyword as bare type", avroTestRecord(avroTestField("a", `"record"`)), `needs an object`},
		{"record without name", `{"type":"record","fields":[]}`, `needs a "name"`},
		{"record without fields", `{"type":"record","name":"R"}`, `"fields" array`},
		{"bad record name", `{"type":"record","name":"1R","fields":[]}`, "not a valid name"},
		{"bad namespace", `{"type":"record","name":"R","namespace":"a..b","fields":[]}`, "namespace"},
		{"field not object", avroTestRecord(`"a"`), "field must be an object"},
		{"field without type", avroTestRecord(`{"name":"a"}`), `no "type"`},
		{"duplicate field", avroTestRecord(avroTestField("a", `"int"`), avroTestField("a", `"long"`)), `field "a" appears twice`},
		{"bad order", avroTestRecord(`{"name":"a","type":"int","order":"up"}`), `"order"`},
		{"defined twice", avroTestRecord(avroTestField("a", `{"type":"fixed","name":"F","size":1}`), avroTestField("b", `{"type":"fixed","name":"F","size":2}`)), `"test.F" is defined twice`},
		{"redefined primitive", `{"type":"fixed","name":"int","size":1}`, "primitive"},
		{"enum symbols missing", `{"type":"enum","name":"E"}`, `"symbols" array`},
		{"enum bad symbol", `{"type":"enum","name":"E","symbols":["a-b"]}`, "not a valid name"},
		{"enum default not a symbol", `{"type":"enum","name":"E","symbols":["A"],"default":"B"}`, "default"},
		{"fixed size negative", `{"type":"fixed","name":"F","size":-1}`, "non-negative"},
		{"fixed size fraction", `{"type":"fixed","name":"F","size":1.5}`, "non-negative integer"},
		{"array without items", `{"type":"array"}`, `needs "items"`},
		{"map without values", `{"type":"map"}`, `needs "values"`},
		{"empty union", avroTestRecord(`{"name":"a","type":[],"default":{}}`), "at least one type"},
		{"nested union", `["null",["int"]]`, "cannot directly contain another union"},
		{"duplicate union branch", `["int","int"]`, "unique"},
		{"bad default", avroTestRecord(`{"name":"a","type":"int","default":"x"}`), "default"},
		{"bad aliases", `{"type":"record","name":"R","aliases":"S","fields":[]}`, "aliases"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := avroFormat{}.Parse(tc.text, nil, nil)
			if err == nil {
				t.Fatalf("parsed %s", tc.text)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "avro schema") {
				t.Errorf("error %q does not say it is about an Avro schema", err)
			}
		})
	}
}

func TestAvroCanonical(t *testing.T) {
	t.Parallel()
	base := `{"type":"record","name":"User","namespace":"com.acme","doc":"a user","fields":[` +
		`{"name":"id","type":"long"},` +
		`{"name":"email","type":["null","string"],"default":null},` +
		`{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B"]}},` +
		`{"name":"prev","type":["null","Kind"],"default":null}]}`
	same := map[string]string{
		"whitespace": strings.ReplaceAll(strings.ReplaceAll(base, ",", ",\n  "), ":", " : "),
		"key order": `{"fields":[` +
			`{"type":"long","name":"id"},` +
			`{"default":null,"name":"email","type":["null",{"type":"string"}]},` +
			`{"name":"kind","type":{"symbols":["A","B"],"name":"Kind","type":"enum"}},` +
			`{"type":["null","com.acme.Kind"],"name":"prev","default":null,"order":"ascending"}],` +
			`"doc":"a user","namespace":"com.acme","name":"User","type":"record"}`,
		"qualified name": strings.Replace(base, `"name":"User","namespace":"com.acme"`, `"name":"com.acme.User"`, 1),
	}
	different := map[string]string{
		"default changed": strings.Replace(base, `"name":"id","type":"long"`, `"name":"id","type":"long","default":0`, 1),
		"doc changed":     strings.Replace(base, `a user`, `a person`, 1),
		"namespace":       strings.Replace(base, `com.acme`, `com.other`, 1),
		"symbol order":    strings.Replace(base, `["A","B"]`, `["B","A"]`, 1),
		"logical type":    strings.Replace(base, `"name":"id","type":"long"`, `"name":"id","type":{"type":"long","logicalType":"timestamp-millis"}`, 1),
		"custom property": strings.Replace(base, `"doc":"a user"`, `"doc":"a user","owner":"team-x"`, 1),
	}
	want := avroMustParse(t, base).Canonical()
	if strings.Contains(want, "\n") || strings.Contains(want, `": `) || strings.Contains(want, `, `) {
		t.Errorf("canonical form has whitespace: %s", want)
	}
	if !strings.Contains(want, `"default":null`) || !strings.Contains(want, `"doc":"a user"`) {
		t.Errorf("canonical form lost defaults or docs: %s", want)
	}
	if strings.Contains(want, `"namespace"`) || !strings.Contains(want, `"com.acme.Kind"`) {
		t.Errorf("canonical form does not use full names: %s", want)
	}
	for name, text := range same {
		if got := avroMustParse(t, text).Canonical(); got != want {
			t.Errorf("%s: canonical form differs:\n got %s\nwant %s", name, got, want)
		}
	}
	for name, text := range different {
		if got := avroMustParse(t, text).Canonical(); got == want {
			t.Errorf("%s: canonical form should differ, both %s", name, got)
		}
	}
	if got := avroMustParse(t, `{"type":"int"}`).Canonical(); got != `"int"` {
		t.Errorf(`{"type":"int"} canonical = %s, want "int"`, got)
	}
	if got := avroMustParse(t, `{"type":"string","doc":"<b>&</b>"}`).Canonical(); got != `{"type":"string","doc":"<b>&</b>"}` {
		t.Errorf("HTML characters: canonical = %s", got)
	}
}

// avroResolver serves schemas by subject.
type avroResolver map[string]struct {
	text string
	refs []schema.Reference
}

func (m avroResolver) resolve(ref schema.Reference) (string, schema.Type, []schema.Reference, error) {
	s, ok := m[ref.Subject]
	if !ok {
		return "", "", nil, fmt.Errorf("no subject %q", ref.Subject)
	}
	return s.text, schema.TypeAvro, s.refs, nil
}

func TestAvroReferences(t *testing.T) {
	t.Parallel()
	country := schema.Reference{Name: "com.acme.Country", Subject: "country", Version: 1}
	address := schema.Reference{Name: "com.acme.Address", Subject: "address", Version: 1}
	money := schema.Reference{Name: "Money", Subject: "money", Version: 1}
	registry := avroResolver{
		"country": {text: `{"type":"enum","name":"Country","namespace":"com.acme","symbols":["NL","FR"]}`},
		"address": {
			text: `{"type":"record","name":"Address","namespace":"com.acme","fields":[{"name":"street","type":"string"},{"name":"country","type":"Country"}]}`,
			refs: []schema.Reference{country},
		},
		"money": {text: `{"type":"record","name":"Money","fields":[{"name":"cents","type":"long"}]}`},
		"cycle": {text: `"int"`, refs: []schema.Reference{{Name: "x", Subject: "cycle", Version: 1}}},
	}
	order := `{"type":"record","name":"Order","namespace":"com.acme","fields":[` +
		`{"name":"ship_to","type":"Address"},{"name":"bill_to","type":"com.acme.Address"},{"name":"total","type":"Money"}]}`
	f := avroFormat{}

	s, err := f.Parse(order, []schema.Reference{address, money}, registry.resolve)
	if err != nil {
		t.Fatalf("parse with references: %v", err)
	}
	if c := s.Canonical(); !strings.Contains(c, `"type":"com.acme.Address"`) || strings.Contains(c, `"street"`) {
		t.Errorf("canonical form should name referenced types, not inline them: %s", c)
	}
	type addr struct {
		Street  string `avro:"street"`
		Country string `avro:"country"`
	}
	type cents struct {
		Cents int64 `avro:"cents"`
	}
	payload := avroEncode(t, s, struct {
		ShipTo addr  `avro:"ship_to"`
		BillTo addr  `avro:"bill_to"`
		Total  cents `avro:"total"`
	}{addr{"Dam 1", "NL"}, addr{"Rue 2", "FR"}, cents{1999}})
	if err := s.Validate(payload); err != nil {
		t.Errorf("validate: %v", err)
	}

	errCases := []struct {
		name    string
		refs    []schema.Reference
		resolve schema.Resolver
		want    string
	}{
		{"missing reference", nil, nil, `unknown type "com.acme.Address"`},
		{"no resolver", []schema.Reference{address}, nil, "without a resolver"},
		{"resolver fails", []schema.Reference{{Name: "X", Subject: "nope", Version: 1}}, registry.resolve, `no subject "nope"`},
		{"cycle", []schema.Reference{{Name: "x", Subject: "cycle", Version: 1}}, registry.resolve, "cycle"},
		{"wrong type", []schema.Reference{address}, func(schema.Reference) (string, schema.Type, []schema.Reference, error) {
			return `{}`, schema.TypeJSON, nil, nil
		}, "not Avro"},
		{"redefinition", []schema.Reference{address, money, {Name: "com.acme.Order", Subject: "order", Version: 1}}, avroResolver{
			"address": registry["address"], "country": registry["country"], "money": registry["money"],
			"order": {text: order, refs: []schema.Reference{address, money}},
		}.resolve, `"com.acme.Order" is defined twice`},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.Parse(order, tc.refs, tc.resolve)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestAvroValidate(t *testing.T) {
	t.Parallel()
	s := avroMustParse(t, avroRequestSchema)
	good := avroEncode(t, s, avroTestRequestValue())
	if err := s.Validate(good); err != nil {
		t.Fatalf("valid payload: %v", err)
	}

	t.Run("every truncation fails", func(t *testing.T) {
		for n := 0; n < len(good); n++ {
			err := s.Validate(good[:n])
			var ve *schema.ValidationError
			if !errors.As(err, &ve) || ve.Rule != "decode" {
				t.Fatalf("truncated to %d of %d bytes: %v, want a decode ValidationError", n, len(good), err)
			}
		}
	})
	t.Run("trailing bytes", func(t *testing.T) {
		err := s.Validate(append(bytes.Clone(good), 0))
		var ve *schema.ValidationError
		if !errors.As(err, &ve) || ve.Rule != "trailing-bytes" || !errors.Is(err, schema.ErrInvalidPayload) {
			t.Fatalf("got %v, want a trailing-bytes ValidationError", err)
		}
	})

	// Hand-written encodings: zigzag varints (0→0, 1→2, -1→1, 2→4), strings
	// as length then bytes, arrays as blocks ended by a zero count.
	model := []byte{0x02, 'm'}                      // "m"
	msg := func(role byte, content string) []byte { // {role, content}
		return append([]byte{role, byte(len(content) * 2)}, content...)
	}
	tail := []byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00} // max_tokens null, temperature 0, metadata {}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name, path, rule, msg string
		payload               []byte
	}{
		{"minimal valid", "", "", "", cat(model, []byte{0x00}, tail)},
		{"wrong enum index", "messages[1].role", "decode", "enum index 7", cat(model, []byte{0x04}, msg(0x02, "hi"), msg(0x0e, "x"), []byte{0x00}, tail)},
		{"negative enum index", "messages[0].role", "decode", "enum index -1", cat(model, []byte{0x02}, msg(0x01, "x"), []byte{0x00}, tail)},
		{"oversize string length", "model", "decode", "exceeds", cat([]byte{0xfe, 0xff, 0xff, 0xff, 0x0f}, tail)},
		{"negative string length", "model", "decode", "negative", cat([]byte{0x01}, tail)},
		{"oversize array count", "messages", "decode", "claims 2147483647 items", cat(model, []byte{0xfe, 0xff, 0xff, 0xff, 0x0f}, tail)},
		{"invalid UTF-8", "messages[0].content", "decode", "UTF-8", cat(model, []byte{0x02}, msg(0x02, "\xff"), []byte{0x00}, tail)},
		{"union branch out of range", "max_tokens", "decode", "union branch 2", cat(model, []byte{0x00, 0x04}, tail)},
		{"varint too long", "max_tokens", "decode", "longer than", cat(model, []byte{0x00, 0x02, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, tail[1:])},
		{"int overflow", "max_tokens", "decode", "overflows", cat(model, []byte{0x00, 0x02, 0xff, 0xff, 0xff, 0xff, 0x1f}, tail[1:])},
		{"block size mismatch", "messages", "decode", "block size", cat(model, []byte{0x01, 0x02}, msg(0x02, "hi"), []byte{0x00}, tail)},
		{"block with size", "", "", "", cat(model, []byte{0x01, 0x08}, msg(0x02, "hi"), []byte{0x00}, tail)},
		{"map value path", `metadata["k"]`, "decode", "string length 5 exceeds", cat(model, []byte{0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x02, 'k', 0x0a})},
		{"truncated double", "temperature", "decode", "a double needs 8 bytes", cat(model, []byte{0x00, 0x00, 0x01, 0x02})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate(tc.payload)
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a ValidationError", err)
			}
			if ve.Path != tc.path || ve.Rule != tc.rule || !strings.Contains(ve.Message, tc.msg) {
				t.Errorf("got path %q rule %q message %q, want path %q rule %q message with %q", ve.Path, ve.Rule, ve.Message, tc.path, tc.rule, tc.msg)
			}
		})
	}
}

func TestAvroValidateBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, schema, want string
		payload            []byte
	}{
		{"boolean byte", `"boolean"`, "0 or 1", []byte{2}},
		{"array of nulls claims 2^62 items", `{"type":"array","items":"null"}`, "zero bytes", []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00}},
		{"arrays of empty records", `{"type":"array","items":{"type":"array","items":{"type":"record","name":"E","fields":[]}}}`, "zero bytes",
			// two inner arrays of 2^20 items each: the budget is per payload
			[]byte{0x04, 0x80, 0x80, 0x80, 0x01, 0x00, 0x80, 0x80, 0x80, 0x01, 0x00, 0x00}},
		{"minimum block count", `{"type":"array","items":"int"}`, "invalid", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00}},
		{"huge fixed", `{"type":"fixed","name":"F","size":2000000000}`, "needs 2000000000 bytes", []byte{1, 2, 3}},
		{"deep recursion", `{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}`, "deeper than",
			bytes.Repeat([]byte{0x02}, 5000)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := avroMustParse(t, tc.schema).Validate(tc.payload)
			var ve *schema.ValidationError
			if !errors.As(err, &ve) || !strings.Contains(ve.Message, tc.want) {
				t.Fatalf("got %v, want a ValidationError mentioning %q", err, tc.want)
			}
		})
	}
	// A zero-byte item type is fine in reasonable numbers.
	s := avroMustParse(t, `{"type":"array","items":"null"}`)
	if err := s.Validate([]byte{0xd0, 0x0f, 0x00}); err != nil { // 1000 nulls
		t.Errorf("1000 nulls: %v", err)
	}
	if err := s.Validate([]byte{0x00}); err != nil {
		t.Errorf("empty array: %v", err)
	}
	if err := avroMustParse(t, `"null"`).Validate(nil); err != nil {
		t.Errorf("null datum: %v", err)
	}
}

// TestAvroValidateAgreesWithHamba encodes values with hamba and checks the
// walker accepts each encoding, and that hamba decodes what the walker
// accepts.
func TestAvroValidateAgreesWithHamba(t *testing.T) {
	t.Parallel()
	s := avroMustParse(t, `{"type":"record","name":"R","fields":[
		{"name":"b","type":"boolean"},{"name":"i","type":"int"},{"name":"l","type":"long"},
		{"name":"f","type":"float"},{"name":"d","type":"double"},{"name":"by","type":"bytes"},
		{"name":"s","type":"string"},{"name":"e","type":{"type":"enum","name":"E","symbols":["X","Y","Z"]}},
		{"name":"fx","type":{"type":"fixed","name":"F","size":3}},
		{"name":"a","type":{"type":"array","items":"long"}},
		{"name":"m","type":{"type":"map","values":["null","string"]}},
		{"name":"u","type":["null","int","string"]},
		{"name":"t","type":{"type":"long","logicalType":"timestamp-micros"}}]}`)
	type rec struct {
		B  bool           `avro:"b"`
		I  int32          `avro:"i"`
		L  int64          `avro:"l"`
		F  float32        `avro:"f"`
		D  float64        `avro:"d"`
		By []byte         `avro:"by"`
		S  string         `avro:"s"`
		E  string         `avro:"e"`
		Fx [3]byte        `avro:"fx"`
		A  []int64        `avro:"a"`
		M  map[string]any `avro:"m"`
		U  any            `avro:"u"`
		T  int64          `avro:"t"`
	}
	values := []rec{
		{E: "X"},
		{B: true, I: -2147483648, L: -9223372036854775808, F: -1.5, D: 1e300, By: []byte{0, 255}, S: "héllo", E: "Z",
			Fx: [3]byte{1, 2, 3}, A: []int64{1, -1, 1 << 40}, M: map[string]any{"a": nil, "b": "x"}, U: "s", T: 1},
		{I: 2147483647, L: 9223372036854775807, A: make([]int64, 250), U: int32(7), E: "Y"},
	}
	hs := s.(*avroSchema).schema
	for i, v := range values {
		payload := avroEncode(t, s, v)
		if err := s.Validate(payload); err != nil {
			t.Errorf("value %d: walker rejects hamba's encoding: %v", i, err)
		}
		var got any
		if err := avro.Unmarshal(hs, payload, &got); err != nil {
			t.Errorf("value %d: hamba cannot decode its own encoding: %v", i, err)
		}
	}
}

// Validating a good payload allocates nothing, so the cost does not grow
// with traffic beyond the CPU time.
func TestAvroValidateAllocs(t *testing.T) {
	s := avroMustParse(t, avroRequestSchema)
	payload := avroEncode(t, s, avroTestRequestValue())
	if n := testing.AllocsPerRun(100, func() { _ = s.Validate(payload) }); n != 0 {
		t.Errorf("Validate allocates %v times per call, want 0", n)
	}
}

func BenchmarkAvroValidate(b *testing.B) {
	s := avroMustParse(b, avroRequestSchema)
	payload := avroEncode(b, s, avroTestRequestValue())
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := s.Validate(payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAvroValidateHamba is the alternative the walker replaces:
// hamba's Unmarshal into a generic value, for comparison.
func BenchmarkAvroValidateHamba(b *testing.B) {
	s := avroMustParse(b, avroRequestSchema)
	payload := avroEncode(b, s, avroTestRequestValue())
	hs := s.(*avroSchema).schema
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var v any
		if err := avro.Unmarshal(hs, payload, &v); err != nil {
			b.Fatal(err)
		}
	}
}
