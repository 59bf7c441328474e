package jsonfmt

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/semaq/semaq/internal/editdist"
)

// knownKeywords are the keywords of drafts 4 to 2020-12, core, validation,
// applicator, format, content and meta-data vocabularies. A schema may
// carry others (they are annotations, ignored by validation), which is
// what makes a misspelt "requird" enforce nothing.
var knownKeywords = []string{
	"$schema", "$id", "id", "$ref", "$defs", "definitions", "$anchor", "$dynamicRef", "$dynamicAnchor",
	"$recursiveRef", "$recursiveAnchor", "$vocabulary", "$comment",
	"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
	"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
	"maxLength", "minLength", "pattern", "items", "additionalItems", "prefixItems", "unevaluatedItems",
	"contains", "maxContains", "minContains", "maxItems", "minItems", "uniqueItems",
	"properties", "patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames",
	"required", "dependentRequired", "dependentSchemas", "dependencies", "maxProperties", "minProperties",
	"allOf", "anyOf", "oneOf", "not", "if", "then", "else",
	"format", "contentEncoding", "contentMediaType", "contentSchema",
}

// Where subschemas sit: keywords whose value is a schema, an array of
// schemas, or an object of schemas by name.
var (
	schemaValued = []string{"not", "if", "then", "else", "additionalProperties", "additionalItems", "unevaluatedItems",
		"unevaluatedProperties", "contains", "propertyNames", "contentSchema", "items"}
	schemaArrays = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
	schemaMaps   = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)

// maxKeywordWarnings bounds what UnknownKeywords reports.
const maxKeywordWarnings = 20

// UnknownKeywords lists the keywords of a JSON Schema that no draft
// defines, each with where it is (a JSON Pointer) and, for a near miss,
// the keyword meant: `/properties/name: unknown keyword "requird" (did you
// mean "required"?)`. Keywords starting with "x-" are a schema author's
// own and are not reported. A text that is not JSON reports nothing (the
// registry says what is wrong with it).
func UnknownKeywords(text string) []string {
	var doc any
	if json.Unmarshal([]byte(text), &doc) != nil {
		return nil
	}
	var out []string
	var walk func(v any, path string, depth int)
	walk = func(v any, path string, depth int) {
		obj, ok := v.(map[string]any)
		if !ok || depth > 64 || len(out) >= maxKeywordWarnings {
			return
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !slices.Contains(knownKeywords, k) && !strings.HasPrefix(k, "x-") && len(out) < maxKeywordWarnings {
				msg := fmt.Sprintf("%s: unknown keyword %q", orRoot(path), k)
				if near := nearestKeyword(k); near != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", near)
				}
				out = append(out, msg+"; validation ignores it")
			}
			child := path + "/" + pointerToken(k)
			switch val := obj[k].(type) {
			case map[string]any:
				if slices.Contains(schemaMaps, k) {
					names := make([]string, 0, len(val))
					for n := range val {
						names = append(names, n)
					}
					sort.Strings(names)
					for _, n := range names {
						walk(val[n], child+"/"+pointerToken(n), depth+1)
					}
				} else if slices.Contains(schemaValued, k) {
					walk(val, child, depth+1)
				}
			case []any:
				if slices.Contains(schemaArrays, k) {
					for i, s := range val {
						walk(s, child+"/"+strconv.Itoa(i), depth+1)
					}
				}
			}
		}
	}
	walk(doc, "", 0)
	return out
}

func orRoot(path string) string {
	if path == "" {
		return "/"
	}
	return path
}

func pointerToken(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }

// nearestKeyword is the known keyword at most two edits from k, "" when
// none is (a keyword of the author's own, not a typo).
func nearestKeyword(k string) string {
	best, dist := "", 3
	lk := strings.ToLower(k)
	for _, w := range knownKeywords {
		if d := editdist.Distance(lk, strings.ToLower(w)); d < dist {
			best, dist = w, d
		}
	}
	return best
}
