package jsonfmt

import (
	"errors"
	"fmt"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

// FuzzJSONSchemaParse: any text either parses or returns an error; a
// parsed schema has a stable canonical form, is compatible with itself,
// and validates its own canonical text without panicking.
func FuzzJSONSchemaParse(f *testing.F) {
	f.Add(jsonTestRequestSchema)
	for _, tc := range jsonCompatCases {
		f.Add(tc.writer)
		f.Add(tc.reader)
	}
	for _, tc := range jsonTestAgreement {
		f.Add(tc.schema)
	}
	f.Add(`{"$ref":"#/definitions/a","definitions":{"a":{"$ref":"#/definitions/b"},"b":{"$ref":"#/definitions/a"}}}`)
	f.Add(`{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"n":{"$dynamicAnchor":"n","items":{"$dynamicRef":"#n"}}},"$ref":"#/$defs/n"}`)
	f.Add(`{"$id":"https://x.example/a","properties":{"b":{"$id":"b","$anchor":"here","type":"string"},"c":{"$ref":"b#here"}}}`)
	f.Add(jsonFanOutSchema(30, "allOf"))
	f.Add(`{"allOf":[{"properties":{"x":{"$ref":"#"}}},{"properties":{"x":{"$ref":"#"}}}]}`)
	f.Add(`{"allOf":[{"$ref":"#"},{"$ref":"#"}],"a":1,"a":2}`)
	f.Fuzz(func(t *testing.T, text string) {
		s, err := jsonFormat{}.Parse(text, nil, nil)
		if err != nil {
			return
		}
		again, err := jsonFormat{}.Parse(s.Canonical(), nil, nil)
		if err != nil {
			t.Fatalf("canonical text does not parse: %v\n%s", err, s.Canonical())
		}
		if again.Canonical() != s.Canonical() {
			t.Fatalf("canonical text is not stable:\n%s\n%s", s.Canonical(), again.Canonical())
		}
		if inc := (jsonFormat{}).Compatibility(s, again); len(inc) != 0 && inc[len(inc)-1].Rule != jsonLimitRule {
			t.Fatalf("schema incompatible with itself: %v", inc)
		}
		if err := s.Validate([]byte(text)); err != nil {
			var verr *schema.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate returned %T: %v", err, err)
			}
		}
	})
}

// FuzzJSONValidate: any payload against the request schema yields nil or
// a *ValidationError, and the fast path never accepts what the library
// rejects.
func FuzzJSONValidate(f *testing.F) {
	s := jsonTestParse(f, jsonTestRequestSchema)
	f.Add(jsonTestRequest)
	for _, p := range []string{`{}`, `[]`, `null`, `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1e400}`,
		`{"model":"m","messages":[{"role":"tool","content":"\ud800"}],"temperature":2.0000000000000000001}`, "{\"model\":\"\xff\"}", `{"a":`,
		`{"model":"m","model":"n","messages":[]}`, `{"messages":[{"role":"user","role":"tool"}]}`, `{"model":"m","\u006dodel":1}`,
		"{\"\xff\":1,\"\xfe\":2}", `{"Model":"m","model":"m","messages":[{"role":"user","content":"x"}]}`} {
		f.Add([]byte(p))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		err := s.Validate(payload)
		if err != nil {
			var verr *schema.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate returned %T: %v", err, err)
			}
			if verr.Rule == "" || verr.Message == "" {
				t.Fatalf("incomplete error %+v", verr)
			}
		}
		jsonCheckAgreement(t, "request schema", s, payload)
	})
}

// FuzzJSONFastPath: over every schema of jsonTestAgreement, the fast path
// and the library reach the same verdict on any payload.
func FuzzJSONFastPath(f *testing.F) {
	schemas := make([]*jsonSchema, len(jsonTestAgreement))
	for i, tc := range jsonTestAgreement {
		schemas[i] = jsonTestParse(f, tc.schema)
		for _, p := range tc.payloads {
			f.Add(uint8(i), []byte(p))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, payload []byte) {
		i := int(which) % len(schemas)
		jsonCheckAgreement(t, fmt.Sprintf("schema %d", i), schemas[i], payload)
	})
}
