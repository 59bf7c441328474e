package jsonfmt

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

// jsonTestRequestSchema describes a chat inference request.
const jsonTestRequestSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["model", "messages"],
  "additionalProperties": false,
  "properties": {
    "model": {"type": "string", "minLength": 1, "maxLength": 64},
    "messages": {
      "type": "array",
      "minItems": 1,
      "items": {
        "type": "object",
        "required": ["role", "content"],
        "additionalProperties": false,
        "properties": {
          "role": {"enum": ["system", "user", "assistant", "tool"]},
          "content": {"type": "string", "maxLength": 100000}
        }
      }
    },
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 32768},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "stream": {"type": "boolean"}
  }
}`

// jsonTestRequest is a valid request of about 300 bytes.
var jsonTestRequest = []byte(`{"model":"llama-3.1-8b-instruct","messages":[` +
	`{"role":"system","content":"You are a concise assistant."},` +
	`{"role":"user","content":"Summarise the attached incident report in three bullet points, naming the failing service and the root cause."}],` +
	`"max_tokens":256,"temperature":0.2,"stream":false}`)

func jsonTestParse(t testing.TB, text string) *jsonSchema {
	t.Helper()
	s, err := jsonFormat{}.Parse(text, nil, nil)
	if err != nil {
		t.Fatalf("Parse(%s): %v", text, err)
	}
	return s.(*jsonSchema)
}

func TestJSONFormatRegistered(t *testing.T) {
	fs := &schema.Formats{}
	fs.Register(New())
	f, err := fs.Get("json")
	if err != nil {
		t.Fatal(err)
	}
	if f.Type() != schema.TypeJSON {
		t.Fatalf("Type() = %q", f.Type())
	}
	s, err := f.Parse(`{"type":"string"}`, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Type() != schema.TypeJSON {
		t.Fatalf("schema Type() = %q", s.Type())
	}
}

func TestJSONParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		want       []string // substrings of the error
	}{
		{"truncated", `{"type":`, []string{"not valid JSON", "line 1, column 9"}},
		{"bad token on line 3", "{\n \"type\": \"string\",\n \"minLength\": x}", []string{"line 3, column 15", "invalid character 'x'"}},
		{"empty", ``, []string{"empty document"}},
		{"two documents", `{} {}`, []string{"after the JSON document"}},
		{"array root", `[{"type":"string"}]`, []string{"JSON object or a boolean", "an array"}},
		{"unknown type", `{"properties":{"age":{"type":"int"}}}`, []string{"/properties/age/type", `"int" is not one of`}},
		{"negative length", `{"minLength":-1}`, []string{"/minLength", "minimum"}},
		{"bad regex", `{"pattern":"("}`, []string{"/pattern", "not valid regex"}},
		{"dangling pointer", `{"$ref":"#/definitions/missing"}`, []string{"#/definitions/missing", "not found"}},
		{"unlisted reference", `{"$ref":"address.json"}`, []string{"address.json", "references"}},
		{"unknown metaschema", `{"$schema":"https://example.com/meta"}`, []string{"https://example.com/meta"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jsonFormat{}.Parse(tc.text, nil, nil)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "semaq.invalid") {
				t.Errorf("error %q leaks the synthetic base URL", err)
			}
		})
	}
}

// TestJSONDrafts checks that $schema picks the draft and that a schema
// without one is draft-07, as in Confluent: before 2019-09 a $ref hides
// its sibling keywords, from 2019-09 on they apply too.
func TestJSONDrafts(t *testing.T) {
	t.Parallel()
	body := `"definitions":{"s":{"type":"string"}},"$ref":"#/definitions/s","maxLength":2`
	for _, tc := range []struct {
		name, schema string
		longOK       bool
	}{
		{"default is draft-07", `{` + body + `}`, true},
		{"draft-07", `{"$schema":"http://json-schema.org/draft-07/schema#",` + body + `}`, true},
		{"2019-09", `{"$schema":"https://json-schema.org/draft/2019-09/schema",` + body + `}`, false},
		{"2020-12", `{"$schema":"https://json-schema.org/draft/2020-12/schema",` + body + `}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := jsonTestParse(t, tc.schema)
			if err := s.Validate([]byte(`7`)); err == nil {
				t.Error("a number passed a string schema")
			}
			err := s.Validate([]byte(`"long"`))
			if (err == nil) != tc.longOK {
				t.Errorf("Validate(\"long\") = %v, want ok=%v", err, tc.longOK)
			}
		})
	}
}

func TestJSONCanonical(t *testing.T) {
	t.Parallel()
	a := jsonTestParse(t, `{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer","maximum":1.50}},"title":"<T&C>"}`)
	b := jsonTestParse(t, "{\n  \"title\": \"<T&C>\",\n  \"properties\": {\n    \"a\": {\"maximum\": 1.50, \"type\": \"integer\"},\n    \"b\": {\"type\": \"string\"}\n  },\n  \"type\": \"object\"\n}")
	if a.Canonical() != b.Canonical() {
		t.Fatalf("whitespace and key order changed the canonical text:\n%s\n%s", a.Canonical(), b.Canonical())
	}
	want := `{"properties":{"a":{"maximum":1.50,"type":"integer"},"b":{"type":"string"}},"title":"<T&C>","type":"object"}`
	if a.Canonical() != want {
		t.Fatalf("Canonical() = %s, want %s", a.Canonical(), want)
	}
	c := jsonTestParse(t, `{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer","maximum":2}},"title":"<T&C>"}`)
	if c.Canonical() == a.Canonical() {
		t.Fatal("different schemas share a canonical text")
	}
}

// jsonTestRegistry resolves references from a map of name -> text.
func jsonTestRegistry(texts map[string]string, refs map[string][]schema.Reference) schema.Resolver {
	return func(ref schema.Reference) (string, schema.Type, []schema.Reference, error) {
		text, ok := texts[ref.Subject]
		if !ok {
			return "", "", nil, fmt.Errorf("subject %q not found", ref.Subject)
		}
		typ := schema.TypeJSON
		if strings.HasPrefix(ref.Subject, "avro-") {
			typ = schema.TypeAvro
		}
		return text, typ, refs[ref.Subject], nil
	}
}

func TestJSONReferences(t *testing.T) {
	t.Parallel()
	texts := map[string]string{
		"address": `{"type":"object","required":["city"],"properties":{"city":{"type":"string"},"country":{"$ref":"country.json"}}}`,
		"country": `{"type":"string","minLength":2,"maxLength":2}`,
		"customer": `{"$id":"https://example.com/schemas/customer.json","type":"object","required":["name"],` +
			`"properties":{"name":{"type":"string"}}}`,
		"avro-thing": `{"type":"record","name":"T","fields":[]}`,
	}
	refs := map[string][]schema.Reference{"address": {{Name: "country.json", Subject: "country", Version: 1}}}
	resolve := jsonTestRegistry(texts, refs)

	t.Run("transitive", func(t *testing.T) {
		s, err := jsonFormat{}.Parse(`{"type":"object","properties":{"ship_to":{"$ref":"address.json"}}}`,
			[]schema.Reference{{Name: "address.json", Subject: "address", Version: 1}}, resolve)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate([]byte(`{"ship_to":{"city":"Lyon","country":"FR"}}`)); err != nil {
			t.Errorf("valid payload: %v", err)
		}
		err = s.Validate([]byte(`{"ship_to":{"city":"Lyon","country":"France"}}`))
		var verr *schema.ValidationError
		if !errors.As(err, &verr) || verr.Path != "/ship_to/country" || verr.Rule != "maxLength" {
			t.Errorf("nested reference violation = %v", err)
		}
	})
	t.Run("relative to $id", func(t *testing.T) {
		s, err := jsonFormat{}.Parse(`{"$id":"https://example.com/schemas/order.json","properties":{"buyer":{"$ref":"customer.json"}}}`,
			[]schema.Reference{{Name: "customer.json", Subject: "customer", Version: 3}}, resolve)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate([]byte(`{"buyer":{}}`)); err == nil {
			t.Error("missing buyer name accepted")
		}
	})
	t.Run("absolute name", func(t *testing.T) {
		_, err := jsonFormat{}.Parse(`{"properties":{"buyer":{"$ref":"https://example.com/schemas/customer.json"}}}`,
			[]schema.Reference{{Name: "https://example.com/schemas/customer.json", Subject: "customer", Version: 3}}, resolve)
		if err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct {
		name    string
		refs    []schema.Reference
		resolve schema.Resolver
		want    string
	}{
		{"no resolver", []schema.Reference{{Name: "a.json", Subject: "address", Version: 1}}, nil, "no resolver"},
		{"unknown subject", []schema.Reference{{Name: "a.json", Subject: "nope", Version: 1}}, resolve, `"a.json"`},
		{"other format", []schema.Reference{{Name: "t.json", Subject: "avro-thing", Version: 1}}, resolve, "AVRO"},
		{"one name, two versions", []schema.Reference{{Name: "c.json", Subject: "country", Version: 1}, {Name: "c.json", Subject: "country", Version: 2}}, resolve, "already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jsonFormat{}.Parse(`{"type":"object"}`, tc.refs, tc.resolve)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestJSONValidate(t *testing.T) {
	t.Parallel()
	s := jsonTestParse(t, jsonTestRequestSchema)
	if err := s.Validate(jsonTestRequest); err != nil {
		t.Fatalf("valid request rejected: %v", err)
	}
	msg := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, payload    string
		path, rule, text string
	}{
		{"missing model", `{` + msg + `}`, "", "required", `missing property "model"`},
		{"missing both", `{}`, "", "required", `missing properties "messages", "model"`},
		{"unknown property", `{"model":"m",` + msg + `,"user":"x"}`, "", "additionalProperties", `property "user" is not allowed`},
		{"wrong type", `{"model":42,` + msg + `}`, "/model", "type", "expected string, got number"},
		{"fraction for integer", `{"model":"m",` + msg + `,"max_tokens":1.5}`, "/max_tokens", "type", "expected integer"},
		{"bad role", `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, "/messages/0/role", "enum", "robot"},
		{"second message", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user"}]}`, "/messages/1", "required", `missing property "content"`},
		{"too long", `{"model":"` + strings.Repeat("m", 65) + `",` + msg + `}`, "/model", "maxLength", "more than maxLength 64"},
		{"empty model", `{"model":"",` + msg + `}`, "/model", "minLength", "fewer than minLength 1"},
		{"above maximum", `{"model":"m",` + msg + `,"temperature":2.5}`, "/temperature", "maximum", "2.5"},
		{"below minimum", `{"model":"m",` + msg + `,"max_tokens":0}`, "/max_tokens", "minimum", ""},
		{"no messages", `{"model":"m","messages":[]}`, "/messages", "minItems", ""},
		{"not an object", `[]`, "", "type", "expected object, got array"},
		{"malformed", `{"model": }`, "", "json", "line 1, column 11"},
		{"malformed later line", "{\"model\": \"m\",\n \"messages\": [,]}", "", "json", "line 2, column 15"},
		{"trailing garbage", `{"model":"m",` + msg + `} x`, "", "json", "after the JSON document"},
		{"empty payload", ``, "", "json", "empty document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate([]byte(tc.payload))
			var verr *schema.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate = %v, want a *ValidationError", err)
			}
			if !errors.Is(err, schema.ErrInvalidPayload) {
				t.Error("error does not match ErrInvalidPayload")
			}
			if verr.Path != tc.path || verr.Rule != tc.rule || !strings.Contains(verr.Message, tc.text) {
				t.Errorf("got path=%q rule=%q message=%q, want path=%q rule=%q message containing %q",
					verr.Path, verr.Rule, verr.Message, tc.path, tc.rule, tc.text)
			}
		})
	}
}

// jsonTestAgreement lists schemas and payloads on which the fast path and
// the library must agree. It covers every keyword the fast path compiles,
// including the negative contexts (not, oneOf, if, contains) where an
// undecided answer must not turn into a verdict.
var jsonTestAgreement = []struct {
	schema   string
	payloads []string
}{
	{jsonTestRequestSchema, []string{string(jsonTestRequest), `{}`, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}`}},
	{`{"type":["integer","null"],"minimum":-3,"exclusiveMaximum":10,"multipleOf":0.5}`,
		[]string{`null`, `-3`, `-3.5`, `9.5`, `10`, `4.0`, `1e1`, `2.00000000000000000001`, `9.99999999999999999999`, `"x"`}},
	{`{"exclusiveMinimum":0.1,"maximum":1e2}`, []string{`0.1`, `0.10000000000000000001`, `100`, `100.0000000000001`, `1e400`, `"s"`}},
	{`{"enum":[1, "a", null, {"k":[1,2]}, [true]],"const":1.0}`, []string{`1`, `1.00`, `"a"`, `{"k":[1,2]}`, `[true]`, `2`}},
	{`{"enum":[1, "a", null, {"k":[1,2]}, [true]]}`, []string{`1.0`, `"a"`, `null`, `{"k":[1,2.0]}`, `[true]`, `[false]`, `{"k":[1]}`}},
	{`{"type":"array","uniqueItems":true,"minItems":1,"maxItems":3,"items":{"type":"number"}}`,
		[]string{`[1,2]`, `[1,1.0]`, `[]`, `[1,2,3,4]`, `[1,"2"]`}},
	{`{"type":"array","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false}`,
		[]string{`["a",1]`, `["a"]`, `["a",1,2]`, `[1]`}},
	{`{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"const":"x"}],"items":{"type":"boolean"},` +
		`"contains":{"const":true},"minContains":2,"maxContains":3}`,
		[]string{`["x",true,true]`, `["x",true]`, `["x",true,true,true,true]`, `["x",false,true,true]`, `["y",true,true]`}},
	{`{"contains":{"not":{"type":"string"}},"maxContains":1}`, []string{`["a",1]`, `[1,2]`, `["a","b"]`, `[]`}},
	{`{"type":"object","properties":{"a":{"type":"string"}},"patternProperties":{"^x-":{"type":"integer"}},` +
		`"additionalProperties":{"type":"boolean"},"propertyNames":{"maxLength":4},"minProperties":1,"maxProperties":3}`,
		[]string{`{"a":"s"}`, `{"x-1":1,"b":true}`, `{"x-1":"1"}`, `{"b":1}`, `{"toolong":true}`, `{}`, `{"a":"s","b":true,"c":true,"d":true}`}},
	{`{"dependencies":{"card":["cvv"],"vip":{"required":["tier"]}}}`,
		[]string{`{"card":1,"cvv":2}`, `{"card":1}`, `{"vip":true,"tier":1}`, `{"vip":true}`, `{}`}},
	{`{"$schema":"https://json-schema.org/draft/2019-09/schema","dependentRequired":{"a":["b"]},"dependentSchemas":{"c":{"maxProperties":1}}}`,
		[]string{`{"a":1,"b":2}`, `{"a":1}`, `{"c":1}`, `{"c":1,"d":2}`}},
	{`{"oneOf":[{"type":"integer"},{"minimum":5}]}`, []string{`1`, `5`, `7.5`, `"s"`, `4.5`}},
	{`{"anyOf":[{"type":"string","pattern":"^a"},{"type":"number"}],"allOf":[{"not":{"const":"ab"}}]}`,
		[]string{`"abc"`, `"ab"`, `"b"`, `3`, `null`}},
	{`{"if":{"properties":{"kind":{"const":"car"}}},"then":{"required":["wheels"]},"else":{"required":["legs"]}}`,
		[]string{`{"kind":"car","wheels":4}`, `{"kind":"car"}`, `{"kind":"cat","legs":4}`, `{"kind":"cat"}`, `3`}},
	{`{"definitions":{"node":{"type":"object","properties":{"next":{"$ref":"#/definitions/node"},"v":{"type":"integer"}}}},"$ref":"#/definitions/node"}`,
		[]string{`{"v":1,"next":{"v":2,"next":{"v":3}}}`, `{"v":1,"next":{"v":"2"}}`, deepList(300, `1`), deepList(300, `"x"`)}},
	{`{"$ref":"#"}`, []string{`1`, `{}`}},
	{`{"format":"email","type":"string"}`, []string{`"a@b.example"`, `"not an email"`}},
	{`{"type":"string","minLength":2,"maxLength":3}`, []string{`"éé"`, `"é"`, `"日本語"`, `"日本語x"`}},
	{`false`, []string{`1`, `{}`}},
	{`true`, []string{`1`, `{}`}},
	{`{"properties":{"never":false}}`, []string{`{}`, `{"never":null}`}},
}

// deepList is {"v":leaf,"next":{...}} nested depth times.
func deepList(depth int, leaf string) string {
	return strings.Repeat(`{"v":1,"next":`, depth) + `{"v":` + leaf + `}` + strings.Repeat(`}`, depth)
}

func TestJSONFastPathAgrees(t *testing.T) {
	t.Parallel()
	for i, tc := range jsonTestAgreement {
		s := jsonTestParse(t, tc.schema)
		for _, p := range tc.payloads {
			jsonCheckAgreement(t, fmt.Sprintf("schema %d", i), s, []byte(p))
		}
	}
}

// jsonCheckAgreement fails when the fast path calls valid a payload the
// library rejects, or when Validate disagrees with the library.
func jsonCheckAgreement(t *testing.T, name string, s *jsonSchema, payload []byte) {
	t.Helper()
	v, err := jsonDecode(payload)
	if err != nil {
		if s.validBytes(payload) {
			t.Errorf("%s: the byte path accepts %q, which does not decode: %v", name, payload, err)
		}
		return
	}
	if _, verr := jsonScanPayload(payload, s.limits); verr != nil {
		if s.validBytes(payload) {
			t.Errorf("%s: the byte path accepts %q, which the scan refuses: %v", name, payload, verr)
		}
		return
	}
	libOK := s.compiled.Validate(v) == nil
	if s.validBytes(payload) && !libOK {
		t.Errorf("%s: the byte path accepts %s, the library rejects it", name, payload)
	}
	if s.fast != nil && s.fast.valid(v) && !libOK {
		t.Errorf("%s: fast path accepts %s, the library rejects it", name, payload)
	}
	if got := s.Validate(payload) == nil; got != libOK {
		t.Errorf("%s: Validate(%s) ok=%v, library ok=%v", name, payload, got, libOK)
	}
}

// TestJSONFastPathUsed guards the performance claim: the request schema
// must not silently fall back to the library for valid payloads.
func TestJSONFastPathUsed(t *testing.T) {
	s := jsonTestParse(t, jsonTestRequestSchema)
	v, err := jsonDecode(jsonTestRequest)
	if err != nil {
		t.Fatal(err)
	}
	if s.fast == nil || !s.fast.valid(v) {
		t.Fatal("the fast path does not accept the valid request")
	}
	u := jsonTestParse(t, `{"$schema":"https://json-schema.org/draft/2020-12/schema","unevaluatedProperties":false}`)
	if u.fast != nil {
		t.Fatal("unevaluatedProperties compiled into the fast path")
	}
}

// BenchmarkJSONValidate validates a ~300-byte inference request: decode
// plus validation, the work ingress does per message.
func BenchmarkJSONValidate(b *testing.B) {
	s := jsonTestParse(b, jsonTestRequestSchema)
	b.SetBytes(int64(len(jsonTestRequest)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Validate(jsonTestRequest); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJSONValidateLibrary is the same work without the fast path,
// for comparison.
func BenchmarkJSONValidateLibrary(b *testing.B) {
	s := jsonTestParse(b, jsonTestRequestSchema)
	b.SetBytes(int64(len(jsonTestRequest)))
	b.ReportAllocs()
	for b.Loop() {
		v, err := jsonDecode(jsonTestRequest)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.compiled.Validate(v); err != nil {
			b.Fatal(err)
		}
	}
}
