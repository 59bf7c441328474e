package jsonfmt

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/semaq/semaq/internal/schema"
)

// JSON Schema compatibility follows Confluent Schema Registry's JSON
// Schema provider. The writer's schema (the original) and the reader's
// (the update) are diffed, keyword by keyword, over the model of
// json_model.go into a list of changes named as Confluent names them; the
// update can read everything written with the original when every change
// is one of jsonCompatibleChanges.
//
// The rules are Confluent's, including where they are coarse: a "required"
// entry counts only for properties both versions declare, an added
// property is incompatible when the original's content model is open
// (additionalProperties absent or true) because old data may carry any
// value under that name, and an allOf/anyOf/oneOf is matched member to
// member (a maximum matching of compatible pairs). SemaQ adds rules where
// Confluent's diff is silent: contains/minContains/maxContains,
// propertyNames, and if/then/else.

// jsonCompatibleChanges are the changes after which data written with the
// original schema is still valid under the update.
var jsonCompatibleChanges = map[string]bool{
	"ID_CHANGED": true, "DESCRIPTION_CHANGED": true, "TITLE_CHANGED": true, "DEFAULT_CHANGED": true,
	"SCHEMA_REMOVED": true, "TYPE_EXTENDED": true,

	"MAX_LENGTH_INCREASED": true, "MAX_LENGTH_REMOVED": true,
	"MIN_LENGTH_DECREASED": true, "MIN_LENGTH_REMOVED": true, "PATTERN_REMOVED": true,

	"MAXIMUM_INCREASED": true, "MAXIMUM_REMOVED": true, "MINIMUM_DECREASED": true, "MINIMUM_REMOVED": true,
	"EXCLUSIVE_MAXIMUM_INCREASED": true, "EXCLUSIVE_MAXIMUM_REMOVED": true,
	"EXCLUSIVE_MINIMUM_DECREASED": true, "EXCLUSIVE_MINIMUM_REMOVED": true,
	"MULTIPLE_OF_REDUCED": true, "MULTIPLE_OF_REMOVED": true,

	"REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED": true, "REQUIRED_ATTRIBUTE_REMOVED": true,
	"DEPENDENCY_ARRAY_NARROWED": true, "DEPENDENCY_ARRAY_REMOVED": true, "DEPENDENCY_SCHEMA_REMOVED": true,
	"MAX_PROPERTIES_INCREASED": true, "MAX_PROPERTIES_REMOVED": true,
	"MIN_PROPERTIES_DECREASED": true, "MIN_PROPERTIES_REMOVED": true,
	"ADDITIONAL_PROPERTIES_ADDED": true, "ADDITIONAL_PROPERTIES_EXTENDED": true,
	"PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL":       true,
	"REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL": true,
	"OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":              true,
	"PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL":        true,
	"PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL":                     true,
	"PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":    true,
	"PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":  true,

	"MAX_ITEMS_INCREASED": true, "MAX_ITEMS_REMOVED": true, "MIN_ITEMS_DECREASED": true, "MIN_ITEMS_REMOVED": true,
	"UNIQUE_ITEMS_REMOVED": true, "ADDITIONAL_ITEMS_ADDED": true, "ADDITIONAL_ITEMS_EXTENDED": true,
	"ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL":      true,
	"ITEM_ADDED_TO_CLOSED_CONTENT_MODEL":                      true,
	"ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL":       true,
	"ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL":                    true,
	"ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":   true,
	"ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": true,
	"MIN_CONTAINS_DECREASED":                                  true, "MAX_CONTAINS_INCREASED": true, "MAX_CONTAINS_REMOVED": true,

	"ENUM_ARRAY_EXTENDED": true,

	"COMBINED_TYPE_EXTENDED": true, "PRODUCT_TYPE_NARROWED": true, "SUM_TYPE_EXTENDED": true,
	"NOT_TYPE_NARROWED": true,
}

// jsonChangeMessages explain the incompatible changes.
var jsonChangeMessages = map[string]string{
	"SCHEMA_ADDED":                "a schema now constrains values that were unconstrained",
	"TYPE_CHANGED":                "the type changed, so old values have the wrong type",
	"TYPE_NARROWED":               "number narrowed to integer, so old fractional values are rejected",
	"MAX_LENGTH_ADDED":            "maxLength was added, so longer old strings are rejected",
	"MAX_LENGTH_DECREASED":        "maxLength decreased, so longer old strings are rejected",
	"MIN_LENGTH_ADDED":            "minLength was added, so shorter old strings are rejected",
	"MIN_LENGTH_INCREASED":        "minLength increased, so shorter old strings are rejected",
	"PATTERN_ADDED":               "a pattern was added, so old strings may not match it",
	"PATTERN_CHANGED":             "the pattern changed, so old strings may not match it",
	"MAXIMUM_ADDED":               "maximum was added, so larger old numbers are rejected",
	"MAXIMUM_DECREASED":           "maximum decreased, so larger old numbers are rejected",
	"MINIMUM_ADDED":               "minimum was added, so smaller old numbers are rejected",
	"MINIMUM_INCREASED":           "minimum increased, so smaller old numbers are rejected",
	"EXCLUSIVE_MAXIMUM_ADDED":     "exclusiveMaximum was added, so larger old numbers are rejected",
	"EXCLUSIVE_MAXIMUM_DECREASED": "exclusiveMaximum decreased, so larger old numbers are rejected",
	"EXCLUSIVE_MINIMUM_ADDED":     "exclusiveMinimum was added, so smaller old numbers are rejected",
	"EXCLUSIVE_MINIMUM_INCREASED": "exclusiveMinimum increased, so smaller old numbers are rejected",
	"MULTIPLE_OF_ADDED":           "multipleOf was added, so old numbers may not be multiples",
	"MULTIPLE_OF_EXPANDED":        "multipleOf became a multiple of the old one, so old numbers may not be multiples",
	"MULTIPLE_OF_CHANGED":         "multipleOf changed, so old numbers may not be multiples",

	"REQUIRED_ATTRIBUTE_ADDED":                                     "the property became required without a default, so old data without it is rejected",
	"MAX_PROPERTIES_ADDED":                                         "maxProperties was added, so larger old objects are rejected",
	"MAX_PROPERTIES_DECREASED":                                     "maxProperties decreased, so larger old objects are rejected",
	"MIN_PROPERTIES_ADDED":                                         "minProperties was added, so smaller old objects are rejected",
	"MIN_PROPERTIES_INCREASED":                                     "minProperties increased, so smaller old objects are rejected",
	"ADDITIONAL_PROPERTIES_REMOVED":                                "additional properties are no longer allowed, so old objects carrying them are rejected",
	"ADDITIONAL_PROPERTIES_NARROWED":                               "additional properties now need to match a schema, so old ones may not",
	"DEPENDENCY_ARRAY_ADDED":                                       "a property dependency was added, so old objects may lack the dependent properties",
	"DEPENDENCY_ARRAY_EXTENDED":                                    "a property dependency requires more properties, so old objects may lack them",
	"DEPENDENCY_ARRAY_CHANGED":                                     "a property dependency changed, so old objects may lack the dependent properties",
	"DEPENDENCY_SCHEMA_ADDED":                                      "a schema dependency was added, so old objects may not match it",
	"OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL":                "a property was declared in an open content model, so old data may hold another value under that name",
	"REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL":                "a required property was added to an open content model, so old data may lack it or hold another value under that name",
	"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":              "a required property without a default was added, so old data without it is rejected",
	"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL":                   "the property was removed from a closed content model, so old data carrying it is rejected",
	"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": "the property was removed and the schema for other properties does not accept its old values",
	"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":   "the property was added with a schema that does not accept what the old schema allowed under its name",

	"MAX_ITEMS_ADDED":                                          "maxItems was added, so longer old arrays are rejected",
	"MAX_ITEMS_DECREASED":                                      "maxItems decreased, so longer old arrays are rejected",
	"MIN_ITEMS_ADDED":                                          "minItems was added, so shorter old arrays are rejected",
	"MIN_ITEMS_INCREASED":                                      "minItems increased, so shorter old arrays are rejected",
	"UNIQUE_ITEMS_ADDED":                                       "uniqueItems was added, so old arrays with duplicates are rejected",
	"ADDITIONAL_ITEMS_REMOVED":                                 "additional items are no longer allowed, so longer old arrays are rejected",
	"ADDITIONAL_ITEMS_NARROWED":                                "additional items now need to match a schema, so old ones may not",
	"ITEM_ADDED_TO_OPEN_CONTENT_MODEL":                         "a tuple item was added to an open content model, so old arrays may hold another value there",
	"ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL":                   "a tuple item was removed from a closed content model, so longer old arrays are rejected",
	"ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL": "a tuple item was removed and the schema for additional items does not accept its old values",
	"ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL":   "a tuple item was added with a schema that does not accept the old additional items",
	"MIN_CONTAINS_INCREASED":                                   "minContains increased, so old arrays with fewer matching items are rejected",
	"MAX_CONTAINS_ADDED":                                       "maxContains was added, so old arrays with more matching items are rejected",
	"MAX_CONTAINS_DECREASED":                                   "maxContains decreased, so old arrays with more matching items are rejected",

	"ENUM_ARRAY_NARROWED": "enum values were removed, so old values may be rejected",
	"ENUM_ARRAY_CHANGED":  "the allowed values changed, so old values may be rejected",

	"COMBINED_TYPE_CHANGED":            "the combination changed (allOf/anyOf/oneOf or if/then/else) in a way that rejects old values",
	"PRODUCT_TYPE_EXTENDED":            "allOf gained a member, so old values must now match more schemas",
	"SUM_TYPE_NARROWED":                "anyOf/oneOf lost a member, so old values matching it are rejected",
	"COMBINED_TYPE_SUBSCHEMAS_CHANGED": "members of the combination changed so that not every old member has a compatible new one",
	"NOT_TYPE_EXTENDED":                "the schema under \"not\" accepts more, so old values may now be excluded",

	jsonLimitRule: "the two schemas are too large or too recursive to compare",
}

// jsonLimitRule reports a comparison abandoned after jsonDiffBudget steps.
const jsonLimitRule = "COMPARISON_LIMIT_EXCEEDED"

// jsonDiffBudget bounds the node comparisons of one Compatibility call:
// combined schemas compare every member with every member, so crafted
// schemas could otherwise make a registration exponentially slow.
const jsonDiffBudget = 200_000

func (jsonFormat) Compatibility(reader, writer schema.Schema) []schema.Incompatibility {
	r, rok := reader.(*jsonSchema)
	w, wok := writer.(*jsonSchema)
	if !rok || !wok {
		return []schema.Incompatibility{{
			Path:    "#/",
			Rule:    "TYPE_CHANGED",
			Message: fmt.Sprintf("a %s schema and a %s schema cannot be compared", writer.Type(), reader.Type()),
		}}
	}
	var out []schema.Incompatibility
	seen := map[jsonChange]bool{}
	for _, c := range jsonDiff(w.model, r.model) {
		if jsonCompatibleChanges[c.kind] || seen[c] {
			continue
		}
		seen[c] = true
		msg, ok := jsonChangeMessages[c.kind]
		if !ok {
			msg = strings.ToLower(strings.ReplaceAll(c.kind, "_", " "))
		}
		out = append(out, schema.Incompatibility{Path: c.path, Rule: c.kind, Message: msg})
	}
	return out
}

// jsonChange is one difference: a Confluent change kind and a JSON pointer
// into the schema.
type jsonChange struct {
	kind string
	path string
}

// jsonDiff lists every change from original to update, compatible or not.
func jsonDiff(original, update *jsonNode) []jsonChange {
	d := &jsonDiffer{budget: &jsonBudget{left: jsonDiffBudget}}
	d.compare(original, update)
	if d.budget.left < 0 {
		d.changes = append(d.changes, jsonChange{jsonLimitRule, "#/"})
	}
	return d.changes
}

type jsonBudget struct{ left int }

// jsonDiffer collects the changes found at one place of the comparison.
// sub starts a scratch differ whose findings the caller may keep or drop.
type jsonDiffer struct {
	path    []string // escaped pointer tokens
	changes []jsonChange
	active  []*jsonNode // original nodes being compared: stops at recursion
	budget  *jsonBudget
}

func (d *jsonDiffer) sub() *jsonDiffer {
	return &jsonDiffer{path: slices.Clone(d.path), active: slices.Clone(d.active), budget: d.budget}
}

func (d *jsonDiffer) push(tokens ...string) {
	for _, t := range tokens {
		d.path = append(d.path, schema.EscapeToken(t))
	}
}

func (d *jsonDiffer) pop(n int) { d.path = d.path[:len(d.path)-n] }

func (d *jsonDiffer) add(kind string) {
	d.changes = append(d.changes, jsonChange{kind, "#/" + strings.Join(d.path, "/")})
}

func (d *jsonDiffer) addAt(attr, kind string) {
	d.push(attr)
	d.add(kind)
	d.pop(1)
}

func (d *jsonDiffer) keep(s *jsonDiffer) { d.changes = append(d.changes, s.changes...) }

func (d *jsonDiffer) compatible() bool {
	for _, c := range d.changes {
		if !jsonCompatibleChanges[c.kind] {
			return false
		}
	}
	return true
}

// jsonDeref follows $ref nodes to the schema they name; an unresolvable or
// endless chain is the empty schema.
func jsonDeref(n *jsonNode) *jsonNode {
	for i := 0; n.kind == jsonKindRef; i++ {
		if n.ref == nil || i == 64 {
			return &jsonNode{kind: jsonKindEmpty}
		}
		n = n.ref
	}
	return n
}

// jsonAcceptsAll reports the empty and true schemas.
func jsonAcceptsAll(n *jsonNode) bool { return n.kind == jsonKindEmpty || n.kind == jsonKindTrue }

func (d *jsonDiffer) compare(o, u *jsonNode) {
	switch {
	case o == nil && u == nil:
		return
	case o == nil:
		d.add("SCHEMA_ADDED")
		return
	case u == nil:
		d.add("SCHEMA_REMOVED")
		return
	}
	if d.budget.left--; d.budget.left < 0 {
		return
	}
	o, u = jsonDeref(o), jsonDeref(u)

	oc, uc := o.kind == jsonKindCombined, u.kind == jsonKindCombined
	if !oc && uc {
		// A plain schema may become one member of a union.
		if len(u.subschemas) == 1 {
			if s := d.sub(); s.compareOK(o, u.subschemas[0]) {
				d.keep(s)
				return
			}
		} else if u.criterion != "allOf" {
			for _, us := range u.subschemas {
				if s := d.sub(); s.compareOK(o, us) {
					d.keep(s)
					d.add("SUM_TYPE_EXTENDED")
					return
				}
			}
		}
	} else if oc && !uc {
		// An intersection may shrink to one of its members.
		if len(o.subschemas) == 1 {
			if s := d.sub(); s.compareOK(o.subschemas[0], u) {
				d.keep(s)
				return
			}
		} else if o.criterion == "allOf" {
			for _, os := range o.subschemas {
				if s := d.sub(); s.compareOK(os, u) {
					d.keep(s)
					d.add("PRODUCT_TYPE_NARROWED")
					return
				}
			}
		}
	}

	if o.kind != u.kind {
		// Anything may become the empty schema, and false may become
		// anything.
		if o.kind != jsonKindFalse && !jsonAcceptsAll(u) {
			d.add("TYPE_CHANGED")
		}
		return
	}
	if slices.Contains(d.active, o) {
		return
	}
	d.active = append(d.active, o)
	defer func() { d.active = d.active[:len(d.active)-1] }()

	if o.id != u.id {
		d.add("ID_CHANGED")
	}
	if o.title != u.title {
		d.add("TITLE_CHANGED")
	}
	if o.description != u.description {
		d.add("DESCRIPTION_CHANGED")
	}
	if (o.def == nil) != (u.def == nil) || (o.def != nil && *o.def != *u.def) {
		d.add("DEFAULT_CHANGED")
	}

	switch o.kind {
	case jsonKindString:
		d.bound("maxLength", "MAX_LENGTH", o.maxLength, u.maxLength)
		d.bound("minLength", "MIN_LENGTH", o.minLength, u.minLength)
		switch {
		case o.pattern == nil && u.pattern != nil:
			d.addAt("pattern", "PATTERN_ADDED")
		case o.pattern != nil && u.pattern == nil:
			d.addAt("pattern", "PATTERN_REMOVED")
		case o.pattern != nil && *o.pattern != *u.pattern:
			d.addAt("pattern", "PATTERN_CHANGED")
		}
	case jsonKindNumber:
		d.number(o, u)
	case jsonKindEnum:
		d.enum(o, u)
	case jsonKindConst:
		if o.values[0] != u.values[0] {
			d.addAt("const", "ENUM_ARRAY_CHANGED")
		}
	case jsonKindCombined:
		d.combined(o, u)
	case jsonKindNot:
		d.push("not")
		// The update may exclude less than the original: compare the
		// excluded schemas the other way round.
		if d.sub().compareOK(u.not, o.not) {
			d.add("NOT_TYPE_NARROWED")
		} else {
			d.add("NOT_TYPE_EXTENDED")
		}
		d.pop(1)
	case jsonKindObject:
		d.object(o, u)
	case jsonKindArray:
		d.array(o, u)
	case jsonKindConditional:
		if o.ifKey != u.ifKey {
			d.addAt("if", "COMBINED_TYPE_CHANGED")
			return
		}
		d.push("then")
		d.compare(o.thenSchema, u.thenSchema)
		d.pop(1)
		d.push("else")
		d.compare(o.elseSchema, u.elseSchema)
		d.pop(1)
	}
}

// compareOK compares into d and reports whether everything found is
// compatible.
func (d *jsonDiffer) compareOK(o, u *jsonNode) bool {
	d.compare(o, u)
	return d.compatible()
}

// bound classifies the change of a numeric keyword; the change kind is
// prefix plus _ADDED, _REMOVED, _INCREASED or _DECREASED.
func (d *jsonDiffer) bound(attr, prefix string, o, u *big.Rat) {
	switch {
	case o == nil && u == nil:
	case o == nil:
		d.addAt(attr, prefix+"_ADDED")
	case u == nil:
		d.addAt(attr, prefix+"_REMOVED")
	case o.Cmp(u) < 0:
		d.addAt(attr, prefix+"_INCREASED")
	case o.Cmp(u) > 0:
		d.addAt(attr, prefix+"_DECREASED")
	}
}

func (d *jsonDiffer) number(o, u *jsonNode) {
	d.bound("maximum", "MAXIMUM", o.maximum, u.maximum)
	d.bound("minimum", "MINIMUM", o.minimum, u.minimum)
	d.bound("exclusiveMaximum", "EXCLUSIVE_MAXIMUM", o.exclusiveMaximum, u.exclusiveMaximum)
	d.bound("exclusiveMinimum", "EXCLUSIVE_MINIMUM", o.exclusiveMinimum, u.exclusiveMinimum)
	switch om, um := o.multipleOf, u.multipleOf; {
	case om == nil && um == nil:
	case om == nil:
		d.addAt("multipleOf", "MULTIPLE_OF_ADDED")
	case um == nil:
		d.addAt("multipleOf", "MULTIPLE_OF_REMOVED")
	case om.Cmp(um) == 0:
	case new(big.Rat).Quo(um, om).IsInt():
		d.addAt("multipleOf", "MULTIPLE_OF_EXPANDED")
	case new(big.Rat).Quo(om, um).IsInt():
		d.addAt("multipleOf", "MULTIPLE_OF_REDUCED")
	default:
		d.addAt("multipleOf", "MULTIPLE_OF_CHANGED")
	}
	if o.integer && !u.integer {
		d.add("TYPE_EXTENDED")
	} else if !o.integer && u.integer {
		d.add("TYPE_NARROWED")
	}
}

func (d *jsonDiffer) enum(o, u *jsonNode) {
	ov, uv := jsonSet(o.values), jsonSet(u.values)
	oInU, uInO := jsonSubset(ov, uv), jsonSubset(uv, ov)
	switch {
	case oInU && uInO:
	case oInU:
		d.addAt("enum", "ENUM_ARRAY_EXTENDED")
	case uInO:
		d.addAt("enum", "ENUM_ARRAY_NARROWED")
	default:
		d.addAt("enum", "ENUM_ARRAY_CHANGED")
	}
}

func jsonSet(values []string) map[string]bool {
	s := make(map[string]bool, len(values))
	for _, v := range values {
		s[v] = true
	}
	return s
}

// jsonSubset reports a ⊆ b.
func jsonSubset(a, b map[string]bool) bool {
	for v := range a {
		if !b[v] {
			return false
		}
	}
	return true
}

func (d *jsonDiffer) combined(o, u *jsonNode) {
	single := func(n *jsonNode) bool { return len(n.subschemas) == 1 }
	switch {
	case o.criterion == u.criterion:
	case u.criterion == "anyOf" || (single(o) && single(u)) ||
		(single(o) && u.criterion == "oneOf") || (single(u) && o.criterion == "allOf"):
		d.add("COMBINED_TYPE_EXTENDED")
	default:
		d.add("COMBINED_TYPE_CHANGED")
		return
	}
	os, us := jsonDistinct(o), jsonDistinct(u)
	switch {
	case len(os) < len(us) && u.criterion == "allOf":
		d.add("PRODUCT_TYPE_EXTENDED")
	case len(os) < len(us):
		d.add("SUM_TYPE_EXTENDED")
	case len(os) > len(us) && o.criterion != "allOf":
		d.add("SUM_TYPE_NARROWED")
	case len(os) > len(us):
		d.add("PRODUCT_TYPE_NARROWED")
	}
	// Every pair of members that is compatible is an edge; the members
	// correspond when a matching covers the smaller side.
	// A synthetic allOf has no members in the schema text, so its
	// members' changes are reported at the schema itself.
	member := func(i int) int {
		if o.synthetic {
			return 0
		}
		d.push(o.criterion, strconv.Itoa(i))
		return 2
	}
	edges := make([][]jsonEdge, len(os))
	for i, a := range os {
		n := member(i)
		for j, b := range us {
			if s := d.sub(); s.compareOK(a, b) {
				edges[i] = append(edges[i], jsonEdge{to: j, changes: s.changes})
			}
		}
		d.pop(n)
	}
	match := jsonMaxMatching(edges, len(us))
	matched := 0
	used := make([]bool, len(us))
	for i, e := range match {
		if e >= 0 {
			matched++
			used[edges[i][e].to] = true
			d.changes = append(d.changes, edges[i][e].changes...)
		}
	}
	if matched == min(len(os), len(us)) {
		return
	}
	d.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")
	if !o.synthetic {
		return
	}
	// The user wrote keywords, not members: say which keyword changed by
	// diffing each unmatched member with the unmatched one of its kind.
	for i, a := range os {
		if match[i] >= 0 {
			continue
		}
		for j, b := range us {
			if !used[j] && jsonDeref(a).kind == jsonDeref(b).kind {
				used[j] = true
				s := d.sub()
				s.compare(a, b)
				d.keep(s)
				break
			}
		}
	}
}

// jsonDistinct lists the members of a combined schema without repeats.
func jsonDistinct(n *jsonNode) []*jsonNode {
	seen := map[string]bool{}
	var out []*jsonNode
	for i, s := range n.subschemas {
		if seen[n.subKeys[i]] {
			continue
		}
		seen[n.subKeys[i]] = true
		out = append(out, s)
	}
	return out
}

type jsonEdge struct {
	to      int
	changes []jsonChange
}

// jsonMaxMatching is a maximum bipartite matching (augmenting paths): for
// each left vertex the index into its edges that is matched, or -1.
func jsonMaxMatching(edges [][]jsonEdge, right int) []int {
	owner := make([]int, right) // right vertex -> left vertex, -1 when free
	for i := range owner {
		owner[i] = -1
	}
	var try func(i int, seen []bool) bool
	try = func(i int, seen []bool) bool {
		for _, e := range edges[i] {
			if seen[e.to] {
				continue
			}
			seen[e.to] = true
			if owner[e.to] < 0 || try(owner[e.to], seen) {
				owner[e.to] = i
				return true
			}
		}
		return false
	}
	for i := range edges {
		try(i, make([]bool, right))
	}
	match := make([]int, len(edges))
	for i := range match {
		match[i] = -1
	}
	for j, i := range owner {
		if i < 0 {
			continue
		}
		for k, e := range edges[i] {
			if e.to == j {
				match[i] = k
			}
		}
	}
	return match
}
