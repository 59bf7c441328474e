package jsonfmt

import (
	"slices"
	"testing"
)

func TestUnknownKeywords(t *testing.T) {
	for _, tc := range []struct {
		name, schema string
		want         []string
	}{
		{"clean", `{"type":"object","required":["a"],"properties":{"a":{"type":"string","x-ui":"text"}}}`, nil},
		{"typo at the root", `{"type":"object","requird":["a"]}`,
			[]string{`/: unknown keyword "requird" (did you mean "required"?); validation ignores it`}},
		{"typo in a property", `{"properties":{"name":{"type":"string","maxLenght":3}}}`,
			[]string{`/properties/name: unknown keyword "maxLenght" (did you mean "maxLength"?); validation ignores it`}},
		{"property names are not keywords", `{"properties":{"requird":{"type":"string"},"a/b":{"typ":"x"}}}`,
			[]string{`/properties/a~1b: unknown keyword "typ" (did you mean "type"?); validation ignores it`}},
		{"in arrays of schemas", `{"anyOf":[{"type":"string"},{"formt":"email"}],"items":[{"minimum":1},{"mininum":2}]}`,
			[]string{`/anyOf/1: unknown keyword "formt" (did you mean "format"?); validation ignores it`,
				`/items/1: unknown keyword "mininum" (did you mean "minimum"?); validation ignores it`}},
		{"far from any keyword", `{"properties":{},"owner":"team-a"}`, []string{`/: unknown keyword "owner"; validation ignores it`}},
		{"enum values are not schemas", `{"enum":[{"requird":1}],"const":{"typ":1},"default":{"x":1}}`, nil},
		{"not JSON", `{`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := UnknownKeywords(tc.schema); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}
