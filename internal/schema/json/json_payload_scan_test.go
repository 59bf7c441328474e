package jsonfmt

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

func TestJSONPayloadDuplicateKeys(t *testing.T) {
	t.Parallel()
	s := jsonTestParse(t, `{"type":"object","properties":{"amount":{"type":"number","minimum":0},"items":{"type":"array"}}}`)
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf(`"k%d":%d`, i, i)
	}
	for _, tc := range []struct {
		name, payload string
		path, key     string // "" path and key: accepted
	}{
		{"last value would pass", `{"amount": 5, "amount": -1000}`, "/amount", "amount"},
		{"first value would pass", `{"amount": -1000, "amount": 5}`, "/amount", "amount"},
		{"escaped spelling", `{"amount": 5, "\u0061mount": -1}`, "/amount", "amount"},
		{"nested in an array", `{"amount":1,"items":[{},{"a":{"x":1,"y":2,"x":3}}]}`, "/items/1/a/x", "x"},
		{"escaped pointer token", `{"a/b~":1,"a/b~":2}`, "/a~1b~0", "a/b~"},
		{"large object", `{` + strings.Join(many, ",") + `,"k7":0}`, "/k7", "k7"},
		{"invalid UTF-8 decodes to the same key", "{\"\xff\":1,\"\xfe\":2}", "/\ufffd", "\ufffd"},
		{"case differs: distinct keys", `{"amount": 5, "Amount": -1000}`, "", ""},
		{"same key in sibling objects", `{"items":[{"a":1},{"a":1}],"amount":1}`, "", ""},
		{"same key at two depths", `{"amount":1,"items":[{"amount":{"amount":2}}]}`, "", ""},
		{"key-like strings are values", `{"items":["amount","amount"],"amount":0}`, "", ""},
		{"large object without duplicates", `{` + strings.Join(many, ",") + `}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate([]byte(tc.payload))
			if tc.key == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var verr *schema.ValidationError
			if !errors.As(err, &verr) || !errors.Is(err, schema.ErrInvalidPayload) {
				t.Fatalf("got %v, want a ValidationError", err)
			}
			if verr.Rule != "duplicateKey" || verr.Path != tc.path || !strings.Contains(verr.Message, fmt.Sprintf("%q", tc.key)) {
				t.Fatalf("got %+v, want duplicateKey of %q at %s", verr, tc.key, tc.path)
			}
		})
	}
}

func TestJSONPayloadNumbersScanned(t *testing.T) {
	t.Parallel()
	s := jsonTestParse(t, `{"type":"object"}`)
	for _, tc := range []struct{ payload, rule, path string }{
		{`{"a":[1,1e999999]}`, "MaxNumberExponent", "/a/1"},
		{`{"a":{"b":` + strings.Repeat("1", 101) + `}}`, "MaxNumberLength", "/a/b"},
		{`{"a":1e10,"b":[true,null,"1e999999"]}`, "", ""},
	} {
		err := s.Validate([]byte(tc.payload))
		var verr *schema.ValidationError
		if tc.rule == "" {
			if err != nil {
				t.Errorf("%s: refused: %v", tc.payload, err)
			}
			continue
		}
		if !errors.As(err, &verr) || verr.Rule != tc.rule || verr.Path != tc.path {
			t.Errorf("%s: got %v, want %s at %s", tc.payload, err, tc.rule, tc.path)
		}
	}
}

// jsonFanOutSchema is levels $defs, each applying the next twice to the
// same value: 2^levels visits from a schema of a few hundred bytes.
func jsonFanOutSchema(levels int, keyword string) string {
	var defs []string
	for i := range levels {
		defs = append(defs, fmt.Sprintf(`"d%d":{%q:[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]}`, i, keyword, i+1, i+1))
	}
	defs = append(defs, fmt.Sprintf(`"d%d":{"type":"integer","minimum":0}`, levels))
	return `{"$schema":"https://json-schema.org/draft/2020-12/schema","$ref":"#/$defs/d0","$defs":{` + strings.Join(defs, ",") + `}}`
}

// TestJSONValidationFanOut: schemas within the compile-time limits whose
// validation would cost 2^30 steps are refused per payload, promptly.
func TestJSONValidationFanOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, schema, payload string
	}{
		{"allOf, valid payload", jsonFanOutSchema(30, "allOf"), `5`},
		{"allOf, invalid payload", jsonFanOutSchema(30, "allOf"), `-5`},
		{"anyOf, invalid payload", jsonFanOutSchema(30, "anyOf"), `"x"`},
		{"oneOf", jsonFanOutSchema(30, "oneOf"), `5`},
		// Fan-out through the payload: each level of nesting doubles.
		{"recursive properties", `{"allOf":[{"properties":{"x":{"$ref":"#"}}},{"properties":{"x":{"$ref":"#"}}}]}`,
			strings.Repeat(`{"x":`, 40) + `1` + strings.Repeat(`}`, 40)},
		// An in-place $ref loop with fan-out: the library cuts it, the
		// fast path must not follow it 200 deep.
		{"in-place loop", `{"allOf":[{"$ref":"#"},{"$ref":"#"}]}`, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := jsonTestParse(t, tc.schema)
			done := make(chan error, 1)
			go func() { done <- s.Validate([]byte(tc.payload)) }()
			var err error
			select {
			case err = <-done:
			case <-t.Context().Done():
				t.Fatal("Validate did not return")
			}
			if tc.name == "in-place loop" {
				var verr *schema.ValidationError
				if !errors.As(err, &verr) {
					t.Fatalf("got %v, want a ValidationError", err)
				}
				return
			}
			var verr *schema.ValidationError
			if !errors.As(err, &verr) || verr.Rule != "MaxValidationSteps" || !strings.Contains(verr.Message, "MaxValidationSteps 1000000") {
				t.Fatalf("got %v, want a MaxValidationSteps refusal", err)
			}
		})
	}
}

// TestJSONValidationFanOutWithinBudget: moderate fan-out and large
// payloads stay accepted.
func TestJSONValidationFanOutWithinBudget(t *testing.T) {
	t.Parallel()
	s := jsonTestParse(t, jsonFanOutSchema(10, "allOf"))
	if err := s.Validate([]byte(`5`)); err != nil {
		t.Fatalf("2^10 visits refused: %v", err)
	}
	big := jsonTestParse(t, `{"type":"array","items":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}}}}`)
	items := strings.Repeat(`{"a":1,"b":"x"},`, 200_000)
	if err := big.Validate([]byte(`[` + items + `{"a":1,"b":"x"}]`)); err != nil {
		t.Fatalf("a 3 MB payload refused: %v", err)
	}
}
