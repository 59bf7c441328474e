package jsonfmt

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/schema"
)

// jsonCompat is one schema evolution: data written with writer (the old
// version), read with reader (the new one). want lists the expected
// incompatibilities as "RULE path"; none means compatible.
type jsonCompat struct {
	name           string
	writer, reader string
	want           []string
}

// jsonObj wraps property definitions in an object schema with an open
// content model.
func jsonObj(props string, extra ...string) string {
	s := `{"type":"object","properties":{` + props + `}`
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

const jsonClosed = `"additionalProperties":false`

var jsonCompatCases = []jsonCompat{
	// types
	{"type changed", jsonObj(`"age":{"type":"string"}`), jsonObj(`"age":{"type":"integer"}`),
		[]string{"TYPE_CHANGED #/properties/age"}},
	{"integer widened to number", jsonObj(`"age":{"type":"integer"}`), jsonObj(`"age":{"type":"number"}`), nil},
	{"number narrowed to integer", jsonObj(`"price":{"type":"number"}`), jsonObj(`"price":{"type":"integer"}`),
		[]string{"TYPE_NARROWED #/properties/price"}},
	{"anything to the empty schema", jsonObj(`"note":{"type":"string","maxLength":5}`), jsonObj(`"note":{}`), nil},
	{"empty schema to a type", jsonObj(`"note":{}`), jsonObj(`"note":{"type":"string"}`),
		[]string{"TYPE_CHANGED #/properties/note"}},
	{"type list gains null", `{"type":["string"]}`, `{"type":["string","null"]}`, nil},
	{"type list loses null", `{"type":["string","null"]}`, `{"type":["string"]}`, []string{"SUM_TYPE_NARROWED #/"}},
	{"nullable via anyOf", `{"type":"string"}`, `{"anyOf":[{"type":"string"},{"type":"null"}]}`, nil},
	{"nullability dropped", `{"anyOf":[{"type":"string"},{"type":"null"}]}`, `{"type":"string"}`, []string{"TYPE_CHANGED #/"}},

	// strings
	{"maxLength increased", `{"type":"string","maxLength":10}`, `{"type":"string","maxLength":20}`, nil},
	{"maxLength decreased", `{"type":"string","maxLength":20}`, `{"type":"string","maxLength":10}`,
		[]string{"MAX_LENGTH_DECREASED #/maxLength"}},
	{"maxLength added", `{"type":"string"}`, `{"type":"string","maxLength":10}`, []string{"MAX_LENGTH_ADDED #/maxLength"}},
	{"minLength removed", `{"type":"string","minLength":3}`, `{"type":"string"}`, nil},
	{"minLength increased", `{"type":"string","minLength":1}`, `{"type":"string","minLength":3}`,
		[]string{"MIN_LENGTH_INCREASED #/minLength"}},
	{"pattern removed", `{"type":"string","pattern":"^[a-z]+$"}`, `{"type":"string"}`, nil},
	{"pattern changed", `{"type":"string","pattern":"^[a-z]+$"}`, `{"type":"string","pattern":"^[a-z0-9]+$"}`,
		[]string{"PATTERN_CHANGED #/pattern"}},
	{"pattern added", `{"type":"string"}`, `{"type":"string","pattern":"^x"}`, []string{"PATTERN_ADDED #/pattern"}},

	// numbers
	{"maximum raised", `{"type":"number","maximum":10}`, `{"type":"number","maximum":100}`, nil},
	{"maximum added", `{"type":"number"}`, `{"type":"number","maximum":100}`, []string{"MAXIMUM_ADDED #/maximum"}},
	{"minimum raised", `{"type":"number","minimum":0}`, `{"type":"number","minimum":1}`, []string{"MINIMUM_INCREASED #/minimum"}},
	{"minimum equal in another spelling", `{"type":"number","minimum":1}`, `{"type":"number","minimum":1.0}`, nil},
	{"exclusiveMinimum lowered", `{"type":"number","exclusiveMinimum":5}`, `{"type":"number","exclusiveMinimum":0}`, nil},
	{"exclusiveMaximum lowered", `{"type":"number","exclusiveMaximum":5}`, `{"type":"number","exclusiveMaximum":4.5}`,
		[]string{"EXCLUSIVE_MAXIMUM_DECREASED #/exclusiveMaximum"}},
	{"multipleOf divides the old one", `{"type":"integer","multipleOf":10}`, `{"type":"integer","multipleOf":5}`, nil},
	{"multipleOf multiplied", `{"type":"integer","multipleOf":5}`, `{"type":"integer","multipleOf":10}`,
		[]string{"MULTIPLE_OF_EXPANDED #/multipleOf"}},
	{"multipleOf unrelated", `{"type":"number","multipleOf":0.5}`, `{"type":"number","multipleOf":0.3}`,
		[]string{"MULTIPLE_OF_CHANGED #/multipleOf"}},

	// required
	{"required dropped", jsonObj(`"id":{"type":"string"}`, `"required":["id"]`), jsonObj(`"id":{"type":"string"}`), nil},
	{"required added", jsonObj(`"id":{"type":"string"}`), jsonObj(`"id":{"type":"string"}`, `"required":["id"]`),
		[]string{"REQUIRED_ATTRIBUTE_ADDED #/required/id"}},
	{"required added with a default", jsonObj(`"currency":{"type":"string"}`),
		jsonObj(`"currency":{"type":"string","default":"EUR"}`, `"required":["currency"]`), nil},

	// content models
	{"property added to an open model", jsonObj(`"id":{"type":"string"}`), jsonObj(`"id":{"type":"string"},"tag":{"type":"string"}`),
		[]string{"OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/tag"}},
	{"property with any value added to an open model", jsonObj(`"id":{"type":"string"}`), jsonObj(`"id":{"type":"string"},"tag":{}`), nil},
	{"property removed from an open model", jsonObj(`"id":{"type":"string"},"tag":{"type":"string"}`), jsonObj(`"id":{"type":"string"}`), nil},
	{"optional property added to a closed model", jsonObj(`"id":{"type":"string"}`, jsonClosed),
		jsonObj(`"id":{"type":"string"},"tag":{"type":"string"}`, jsonClosed), nil},
	{"required property added to a closed model", jsonObj(`"id":{"type":"string"}`, jsonClosed),
		jsonObj(`"id":{"type":"string"},"tag":{"type":"string"}`, jsonClosed, `"required":["tag"]`),
		[]string{"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/tag"}},
	{"property removed from a closed model", jsonObj(`"id":{"type":"string"},"tag":{"type":"string"}`, jsonClosed),
		jsonObj(`"id":{"type":"string"}`, jsonClosed),
		[]string{"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/tag"}},
	{"forbidden property removed from a closed model", jsonObj(`"id":{"type":"string"},"legacy":false`, jsonClosed),
		jsonObj(`"id":{"type":"string"}`, jsonClosed), nil},
	{"closed by unevaluatedProperties (2020-12)",
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"id":{"type":"string"}},"unevaluatedProperties":false}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"id":{"type":"string"},"tag":{"type":"string"}},"unevaluatedProperties":false}`,
		nil},
	{"property added within additionalProperties", jsonObj(`"id":{"type":"string"}`, `"additionalProperties":{"type":"string"}`),
		jsonObj(`"id":{"type":"string"},"tag":{"type":"string","maxLength":9}`, `"additionalProperties":{"type":"string"}`),
		[]string{"MAX_LENGTH_ADDED #/properties/tag/maxLength", "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/tag"}},
	{"property added matching additionalProperties", jsonObj(`"id":{"type":"string"}`, `"additionalProperties":{"type":"string"}`),
		jsonObj(`"id":{"type":"string"},"tag":{"type":"string"}`, `"additionalProperties":{"type":"string"}`), nil},
	{"property removed into patternProperties", jsonObj(`"x-count":{"type":"integer"}`, jsonClosed),
		jsonObj(``, jsonClosed, `"patternProperties":{"^x-":{"type":"number"}}`), nil},
	{"property removed outside patternProperties", jsonObj(`"count":{"type":"integer"}`, jsonClosed),
		jsonObj(``, jsonClosed, `"patternProperties":{"^x-":{"type":"number"}}`),
		[]string{"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/count"}},
	{"additionalProperties opened", jsonObj(`"id":{"type":"string"}`, jsonClosed), jsonObj(`"id":{"type":"string"}`), nil},
	{"additionalProperties closed", jsonObj(`"id":{"type":"string"}`), jsonObj(`"id":{"type":"string"}`, jsonClosed),
		[]string{"ADDITIONAL_PROPERTIES_REMOVED #/additionalProperties"}},
	{"additionalProperties given a schema", `{"type":"object"}`, `{"type":"object","additionalProperties":{"type":"string"}}`,
		[]string{"ADDITIONAL_PROPERTIES_NARROWED #/additionalProperties"}},
	{"maxProperties lowered", `{"type":"object","maxProperties":5}`, `{"type":"object","maxProperties":4}`,
		[]string{"MAX_PROPERTIES_DECREASED #/maxProperties"}},
	{"minProperties lowered", `{"type":"object","minProperties":2}`, `{"type":"object","minProperties":1}`, nil},
	{"nested property retyped", jsonObj(`"ship_to":` + jsonObj(`"zip":{"type":"string"}`)), jsonObj(`"ship_to":` + jsonObj(`"zip":{"type":"integer"}`)),
		[]string{"TYPE_CHANGED #/properties/ship_to/properties/zip"}},
	{"property name with a slash", jsonObj(`"a/b":{"type":"string"}`), jsonObj(`"a/b":{"type":"boolean"}`),
		[]string{"TYPE_CHANGED #/properties/a~1b"}},

	// dependencies
	{"dependency dropped", `{"dependencies":{"card":["cvv"]}}`, `{"dependencies":{}}`, nil},
	{"dependency added", `{"dependencies":{}}`, `{"dependencies":{"card":["cvv"]}}`, []string{"DEPENDENCY_ARRAY_ADDED #/dependencies/card"}},
	{"dependency narrowed", `{"dependencies":{"card":["cvv","expiry"]}}`, `{"dependencies":{"card":["cvv"]}}`, nil},
	{"dependency extended", `{"dependencies":{"card":["cvv"]}}`, `{"dependencies":{"card":["cvv","expiry"]}}`,
		[]string{"DEPENDENCY_ARRAY_EXTENDED #/dependencies/card"}},
	{"schema dependency added (2019-09)", `{"$schema":"https://json-schema.org/draft/2019-09/schema","type":"object"}`,
		`{"$schema":"https://json-schema.org/draft/2019-09/schema","type":"object","dependentSchemas":{"vip":{"required":["tier"]}}}`,
		[]string{"DEPENDENCY_SCHEMA_ADDED #/dependencies/vip"}},

	// arrays
	{"items constrained", `{"type":"array"}`, `{"type":"array","items":{"type":"string"}}`, []string{"SCHEMA_ADDED #/items"}},
	{"items unconstrained", `{"type":"array","items":{"type":"string"}}`, `{"type":"array"}`, nil},
	{"items retyped", `{"type":"array","items":{"type":"string"}}`, `{"type":"array","items":{"type":"number"}}`,
		[]string{"TYPE_CHANGED #/items"}},
	{"tuple item added to a closed tuple", `{"type":"array","items":[{"type":"string"}],"additionalItems":false}`,
		`{"type":"array","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false}`, nil},
	{"tuple item removed from a closed tuple", `{"type":"array","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false}`,
		`{"type":"array","items":[{"type":"string"}],"additionalItems":false}`,
		[]string{"ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL #/items/1"}},
	{"tuple item added to an open tuple", `{"type":"array","items":[{"type":"string"}]}`,
		`{"type":"array","items":[{"type":"string"},{"type":"integer"}]}`, []string{"ITEM_ADDED_TO_OPEN_CONTENT_MODEL #/items/1"}},
	{"tuple item removed from an open tuple", `{"type":"array","items":[{"type":"string"},{"type":"integer"}]}`,
		`{"type":"array","items":[{"type":"string"}]}`, nil},
	{"prefixItems item added under items:false (2020-12)",
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"}],"items":false}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"},{"type":"number"}],"items":false}`, nil},
	{"prefixItems item removed under items:false (2020-12)",
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"},{"type":"number"}],"items":false}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","prefixItems":[{"type":"string"}],"items":false}`,
		[]string{"ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL #/items/1"}},
	{"maxItems lowered", `{"type":"array","maxItems":10}`, `{"type":"array","maxItems":5}`, []string{"MAX_ITEMS_DECREASED #/maxItems"}},
	{"minItems removed", `{"type":"array","minItems":1}`, `{"type":"array"}`, nil},
	{"uniqueItems added", `{"type":"array"}`, `{"type":"array","uniqueItems":true}`, []string{"UNIQUE_ITEMS_ADDED #/uniqueItems"}},
	{"uniqueItems removed", `{"type":"array","uniqueItems":true}`, `{"type":"array"}`, nil},
	{"contains added", `{"type":"array"}`, `{"type":"array","contains":{"type":"string"}}`, []string{"SCHEMA_ADDED #/contains"}},
	{"minContains raised", `{"$schema":"https://json-schema.org/draft/2020-12/schema","contains":{"type":"string"}}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","contains":{"type":"string"},"minContains":2}`,
		[]string{"MIN_CONTAINS_INCREASED #/minContains"}},
	{"minContains lowered", `{"$schema":"https://json-schema.org/draft/2020-12/schema","contains":{"type":"string"},"minContains":2}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","contains":{"type":"string"}}`, nil},

	// enum and const
	{"enum extended", `{"enum":["red","green"]}`, `{"enum":["red","green","blue"]}`, nil},
	{"enum narrowed", `{"enum":["red","green"]}`, `{"enum":["red"]}`, []string{"ENUM_ARRAY_NARROWED #/enum"}},
	{"enum changed", `{"enum":["red","green"]}`, `{"enum":["red","blue"]}`, []string{"ENUM_ARRAY_CHANGED #/enum"}},
	{"typed enum narrowed", `{"type":"string","enum":["red","green"]}`, `{"type":"string","enum":["red"]}`,
		[]string{"COMBINED_TYPE_SUBSCHEMAS_CHANGED #/", "ENUM_ARRAY_NARROWED #/enum"}},
	{"enum dropped from a typed enum", `{"type":"string","enum":["red","green"]}`, `{"type":"string"}`, nil},
	{"const changed", `{"const":"v1"}`, `{"const":"v2"}`, []string{"ENUM_ARRAY_CHANGED #/const"}},

	// combined schemas
	{"oneOf gains a member", `{"oneOf":[{"type":"string"},{"type":"integer"}]}`,
		`{"oneOf":[{"type":"string"},{"type":"integer"},{"type":"boolean"}]}`, nil},
	{"oneOf loses a member", `{"oneOf":[{"type":"string"},{"type":"integer"}]}`, `{"oneOf":[{"type":"string"}]}`,
		[]string{"SUM_TYPE_NARROWED #/"}},
	{"allOf gains a member", `{"allOf":[{"type":"string"}]}`, `{"allOf":[{"type":"string"},{"maxLength":3}]}`,
		[]string{"PRODUCT_TYPE_EXTENDED #/"}},
	{"allOf loses a member", `{"allOf":[{"type":"string"},{"maxLength":3}]}`, `{"allOf":[{"type":"string"}]}`, nil},
	{"oneOf becomes anyOf", `{"oneOf":[{"type":"string"},{"type":"integer"}]}`, `{"anyOf":[{"type":"string"},{"type":"integer"}]}`, nil},
	{"anyOf becomes oneOf", `{"anyOf":[{"type":"string"},{"type":"integer"}]}`, `{"oneOf":[{"type":"string"},{"type":"integer"}]}`,
		[]string{"COMBINED_TYPE_CHANGED #/"}},
	{"oneOf member tightened", `{"oneOf":[{"type":"string"},{"type":"integer"}]}`,
		`{"oneOf":[{"type":"string","maxLength":4},{"type":"integer"}]}`, []string{"COMBINED_TYPE_SUBSCHEMAS_CHANGED #/"}},
	{"oneOf members reordered and loosened", `{"oneOf":[{"type":"string","maxLength":4},{"type":"integer"}]}`,
		`{"oneOf":[{"type":"integer"},{"type":"string"}]}`, nil},
	{"not narrowed", `{"not":{"type":"number"}}`, `{"not":{"type":"integer"}}`, nil},
	{"not extended", `{"not":{"type":"integer"}}`, `{"not":{"type":"number"}}`, []string{"NOT_TYPE_EXTENDED #/not"}},

	// references
	{"moved behind a $ref", jsonObj(`"id":{"type":"string"}`),
		jsonObj(`"id":{"$ref":"#/definitions/id"}`, `"definitions":{"id":{"type":"string"}}`), nil},
	{"referenced definition retyped", jsonObj(`"id":{"$ref":"#/definitions/id"}`, `"definitions":{"id":{"type":"string"}}`),
		jsonObj(`"id":{"$ref":"#/definitions/id"}`, `"definitions":{"id":{"type":"integer"}}`),
		[]string{"TYPE_CHANGED #/properties/id"}},
	{"recursive tree", jsonObj(`"value":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}`),
		jsonObj(`"value":{"type":"string","maxLength":3},"children":{"type":"array","items":{"$ref":"#"}}`),
		[]string{"MAX_LENGTH_ADDED #/properties/value/maxLength"}},

	// if/then/else (SemaQ's rule)
	{"then loosened", `{"if":{"required":["card"]},"then":{"required":["cvv","zip"]}}`, `{"if":{"required":["card"]},"then":{"required":["cvv"]}}`, nil},
	{"then added", `{"if":{"required":["card"]}}`, `{"if":{"required":["card"]},"then":{"required":["cvv"]}}`,
		[]string{"SCHEMA_ADDED #/then"}},
	{"if changed", `{"if":{"required":["card"]},"then":{"required":["cvv"]}}`, `{"if":{"required":["iban"]},"then":{"required":["cvv"]}}`,
		[]string{"COMBINED_TYPE_CHANGED #/if"}},

	// annotations never break data
	{"annotations changed", `{"title":"Order","description":"v1","default":{},"type":"object"}`,
		`{"title":"Purchase order","description":"v2","default":{"id":"x"},"type":"object"}`, nil},
}

func TestJSONCompatibility(t *testing.T) {
	t.Parallel()
	for _, tc := range jsonCompatCases {
		t.Run(tc.name, func(t *testing.T) {
			writer := jsonTestParse(t, tc.writer)
			reader := jsonTestParse(t, tc.reader)
			var got []string
			for _, inc := range (jsonFormat{}).Compatibility(reader, writer) {
				got = append(got, inc.Rule+" "+inc.Path)
				if inc.Message == "" {
					t.Errorf("%s has no message", inc.Rule)
				}
			}
			want := slices.Clone(tc.want)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("incompatibilities:\n got  %q\n want %q", got, want)
			}
		})
	}
}

// TestJSONCompatibilityTableSize keeps the table from shrinking below
// both directions of every rule family.
func TestJSONCompatibilityTableSize(t *testing.T) {
	compatible, incompatible := 0, 0
	for _, tc := range jsonCompatCases {
		if len(tc.want) == 0 {
			compatible++
		} else {
			incompatible++
		}
	}
	if compatible < 30 || incompatible < 30 {
		t.Fatalf("%d compatible and %d incompatible cases, want at least 30 of each", compatible, incompatible)
	}
}

func TestJSONCompatibilityIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range jsonCompatCases {
		for _, text := range []string{tc.writer, tc.reader} {
			s := jsonTestParse(t, text)
			if inc := (jsonFormat{}).Compatibility(s, s); len(inc) != 0 {
				t.Errorf("%s: a schema is incompatible with itself: %v", tc.name, inc)
			}
		}
	}
}

func TestJSONCompatibilityReferences(t *testing.T) {
	t.Parallel()
	parse := func(country string) schema.Schema {
		texts := map[string]string{"country": country}
		s, err := jsonFormat{}.Parse(jsonObj(`"country":{"$ref":"country.json"}`),
			[]schema.Reference{{Name: "country.json", Subject: "country", Version: 1}}, jsonTestRegistry(texts, nil))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	old, loose, tight := parse(`{"type":"string","maxLength":3}`), parse(`{"type":"string"}`), parse(`{"type":"string","maxLength":2}`)
	if inc := (jsonFormat{}).Compatibility(loose, old); len(inc) != 0 {
		t.Errorf("loosened reference: %v", inc)
	}
	inc := (jsonFormat{}).Compatibility(tight, old)
	if len(inc) != 1 || inc[0].Rule != "MAX_LENGTH_DECREASED" || inc[0].Path != "#/properties/country/maxLength" {
		t.Errorf("tightened reference: %v", inc)
	}
}

type jsonTestOtherSchema struct{}

func (jsonTestOtherSchema) Type() schema.Type       { return schema.TypeAvro }
func (jsonTestOtherSchema) Canonical() string       { return `"string"` }
func (jsonTestOtherSchema) Validate(_ []byte) error { return nil }

func TestJSONCompatibilityOtherFormat(t *testing.T) {
	s := jsonTestParse(t, `{"type":"string"}`)
	inc := (jsonFormat{}).Compatibility(s, jsonTestOtherSchema{})
	if len(inc) != 1 || inc[0].Rule != "TYPE_CHANGED" || !strings.Contains(inc[0].Message, "AVRO") {
		t.Fatalf("Compatibility across formats = %v", inc)
	}
}

// TestJSONCompatibilityLimit: nested unions compare every member with
// every member; the budget must stop that and say so.
func TestJSONCompatibilityLimit(t *testing.T) {
	t.Parallel()
	member := func(i int) string {
		var inner []string
		for j := range 30 {
			inner = append(inner, fmt.Sprintf(`{"const":"v%d"}`, j))
		}
		return fmt.Sprintf(`{"title":"m%d","anyOf":[%s]}`, i, strings.Join(inner, ","))
	}
	var members []string
	for i := range 30 {
		members = append(members, member(i))
	}
	s := jsonTestParse(t, `{"anyOf":[`+strings.Join(members, ",")+`]}`)
	start := time.Now()
	inc := (jsonFormat{}).Compatibility(s, s)
	if len(inc) == 0 || inc[len(inc)-1].Rule != jsonLimitRule {
		t.Fatalf("Compatibility = %v, want %s", inc, jsonLimitRule)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the budget did not bound the comparison: %v", d)
	}
}

// jsonModeVersions are two histories (oldest first) and a candidate. The
// first shows transitive backward checks, the second transitive forward
// checks: the candidate agrees with the latest version but not the first.
var jsonModeHistories = []struct {
	name      string
	versions  []string
	candidate string
	want      map[schema.Mode][]string // "RULE vN" per expected incompatibility
}{
	{
		name:      "maxLength 20, 10, then 15",
		versions:  []string{`{"type":"string","maxLength":20}`, `{"type":"string","maxLength":10}`},
		candidate: `{"type":"string","maxLength":15}`,
		want: map[schema.Mode][]string{
			schema.Backward:           nil,
			schema.BackwardTransitive: {"MAX_LENGTH_DECREASED backward v1"},
			schema.Forward:            {"MAX_LENGTH_DECREASED forward v2"},
			schema.ForwardTransitive:  {"MAX_LENGTH_DECREASED forward v2"},
			schema.Full:               {"MAX_LENGTH_DECREASED forward v2"},
			schema.FullTransitive:     {"MAX_LENGTH_DECREASED backward v1", "MAX_LENGTH_DECREASED forward v2"},
			schema.None:               nil,
		},
	},
	{
		name:      "maxLength 5, 20, then 10",
		versions:  []string{`{"type":"string","maxLength":5}`, `{"type":"string","maxLength":20}`},
		candidate: `{"type":"string","maxLength":10}`,
		want: map[schema.Mode][]string{
			schema.Backward:           {"MAX_LENGTH_DECREASED backward v2"},
			schema.BackwardTransitive: {"MAX_LENGTH_DECREASED backward v2"},
			schema.Forward:            nil,
			schema.ForwardTransitive:  {"MAX_LENGTH_DECREASED forward v1"},
			schema.Full:               {"MAX_LENGTH_DECREASED backward v2"},
			schema.FullTransitive:     {"MAX_LENGTH_DECREASED backward v2", "MAX_LENGTH_DECREASED forward v1"},
			schema.None:               nil,
		},
	},
	{
		name: "optional property in a closed model",
		versions: []string{jsonObj(`"id":{"type":"string"}`, jsonClosed),
			jsonObj(`"id":{"type":"string"}`, jsonClosed)},
		candidate: jsonObj(`"id":{"type":"string"},"tag":{"type":"string"}`, jsonClosed),
		want: map[schema.Mode][]string{
			schema.Backward:           nil,
			schema.BackwardTransitive: nil,
			schema.Forward:            {"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL forward v2"},
			schema.ForwardTransitive:  {"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL forward v2", "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL forward v1"},
			schema.Full:               {"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL forward v2"},
			schema.FullTransitive:     {"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL forward v2", "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL forward v1"},
			schema.None:               nil,
		},
	},
}

func TestJSONCheckModes(t *testing.T) {
	t.Parallel()
	f := jsonFormat{}
	for _, h := range jsonModeHistories {
		var previous []schema.Schema
		for _, v := range h.versions {
			previous = append(previous, jsonTestParse(t, v))
		}
		candidate := jsonTestParse(t, h.candidate)
		for _, mode := range schema.Modes {
			t.Run(h.name+"/"+string(mode), func(t *testing.T) {
				want, ok := h.want[mode]
				if !ok {
					t.Fatalf("no expectation for %s", mode)
				}
				var got []string
				for _, inc := range schema.Check(f, mode, candidate, previous) {
					got = append(got, inc.Rule+" "+jsonTestDirection(t, inc.Message))
				}
				want = slices.Clone(want)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Errorf("Check(%s):\n got  %q\n want %q", mode, got, want)
				}
			})
		}
	}
}

// jsonTestDirection reads Check's message prefix back as "backward vN"
// or "forward vN".
func jsonTestDirection(t *testing.T, msg string) string {
	var n int
	if _, err := fmt.Sscanf(msg, "new schema cannot read data written with version %d", &n); err == nil {
		return fmt.Sprintf("backward v%d", n)
	}
	if _, err := fmt.Sscanf(msg, "version %d cannot read data written with the new schema", &n); err == nil {
		return fmt.Sprintf("forward v%d", n)
	}
	t.Fatalf("unexpected message %q", msg)
	return ""
}
