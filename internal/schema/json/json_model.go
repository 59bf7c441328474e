package jsonfmt

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/semaq/semaq/internal/schema"
)

// The compatibility rules of Confluent's JSON Schema provider are defined
// on the everit-json-schema object model, not on raw keywords: a schema
// object is one "class" (string, number, object, array, enum, const,
// combined, not...) and a schema that mixes keyword groups, such as
// {"type":"string","enum":[...]}, is a synthetic allOf of one class per
// group. Whether a change is compatible depends on that shape (a changed
// class is TYPE_CHANGED, an allOf that loses a member is
// PRODUCT_TYPE_NARROWED), so this file builds the same shape from the
// schema text. Drafts 2019-09 and 2020-12 map onto it the way Confluent
// translates them: prefixItems are the tuple, items after prefixItems and
// unevaluatedItems play additionalItems, unevaluatedProperties plays
// additionalProperties, dependentRequired/dependentSchemas are the two
// kinds of dependencies.

// jsonNodeKind is the class of a schema node.
type jsonNodeKind uint8

const (
	jsonKindEmpty jsonNodeKind = iota // {}: accepts everything
	jsonKindTrue                      // true: accepts everything
	jsonKindFalse                     // false: accepts nothing
	jsonKindString
	jsonKindNumber
	jsonKindBoolean
	jsonKindNull
	jsonKindObject
	jsonKindArray
	jsonKindEnum
	jsonKindConst
	jsonKindCombined
	jsonKindNot
	jsonKindConditional
	jsonKindRef
)

// jsonNode is one schema in the model. Which fields are set depends on
// kind. Nodes are immutable once the model is built.
type jsonNode struct {
	kind jsonNodeKind

	// annotations, compared but never incompatible
	id, title, description string
	def                    *string // canonical default value

	// string
	minLength, maxLength *big.Rat
	pattern              *string

	// number
	minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf *big.Rat
	integer                                                          bool

	// object
	properties           map[string]*jsonNode
	required             map[string]bool
	patternProperties    []jsonPatternProperty
	closedProperties     bool      // additionalProperties: false
	additionalProperties *jsonNode // additionalProperties as a schema
	propertyDependencies map[string][]string
	schemaDependencies   map[string]*jsonNode
	propertyNames        *jsonNode
	minProperties        *big.Rat
	maxProperties        *big.Rat

	// array
	allItems        *jsonNode   // items as one schema for every item
	items           []*jsonNode // tuple: items as an array, or prefixItems
	closedItems     bool        // additionalItems: false
	additionalItems *jsonNode   // additionalItems as a schema
	contains        *jsonNode
	minContains     *big.Rat
	maxContains     *big.Rat
	minItems        *big.Rat
	maxItems        *big.Rat
	uniqueItems     bool

	// enum and const: canonical texts of the allowed values
	values []string

	// combined
	criterion  string // allOf, anyOf or oneOf
	synthetic  bool   // an allOf of keyword groups the schema did not write
	subschemas []*jsonNode
	subKeys    []string // identity of each subschema, for de-duplication

	// not
	not *jsonNode

	// conditional
	ifSchema, thenSchema, elseSchema *jsonNode
	ifKey                            string

	// ref: the referred node, nil when it could not be resolved
	ref *jsonNode
}

type jsonPatternProperty struct {
	pattern string
	re      *regexp.Regexp
	schema  *jsonNode
}

// jsonLoc is a place in one of the documents.
type jsonLoc struct {
	doc *jsonDoc
	ptr string // JSON pointer from the document root
}

func (l jsonLoc) key() string { return l.doc.url + "#" + l.ptr }

func (l jsonLoc) child(tokens ...string) jsonLoc {
	p := l.ptr
	for _, t := range tokens {
		p += "/" + schema.EscapeToken(t)
	}
	return jsonLoc{l.doc, p}
}

// jsonModelBuilder turns documents into nodes, resolving $refs by URI,
// embedded $id, anchor and JSON pointer.
type jsonModelBuilder struct {
	docs    map[string]*jsonDoc
	ids     map[string]jsonLoc // absolute $id of embedded resources
	anchors map[string]jsonLoc // base URL + "#" + anchor
	bases   map[string]string  // location key -> base URI in effect there
	nodes   map[string]*jsonNode
}

// jsonBuildModel builds the model of docs[0], the root; the others are the
// documents its references brought.
func jsonBuildModel(docs []*jsonDoc) *jsonNode {
	b := &jsonModelBuilder{
		docs:    map[string]*jsonDoc{},
		ids:     map[string]jsonLoc{},
		anchors: map[string]jsonLoc{},
		bases:   map[string]string{},
		nodes:   map[string]*jsonNode{},
	}
	for _, d := range docs {
		b.docs[d.url] = d
	}
	for _, d := range docs {
		b.index(d.raw, jsonLoc{d, ""}, d.url)
	}
	return b.node(jsonLoc{docs[0], ""})
}

// index records, for every schema location, the base URI in effect and
// every $id and anchor it declares.
func (b *jsonModelBuilder) index(v any, loc jsonLoc, base string) {
	m, ok := v.(map[string]any)
	if !ok {
		b.bases[loc.key()] = base
		return
	}
	if id, ok := m[jsonIDKeyword(loc.doc.draft)].(string); ok && id != "" {
		if strings.HasPrefix(id, "#") {
			b.anchors[base+id] = loc // draft-07 and older: "$id": "#name"
		} else if u, err := jsonResolveURL(base, id); err == nil {
			base = u
			if _, dup := b.ids[u]; !dup {
				b.ids[u] = loc
			}
			if _, frag, ok := strings.Cut(id, "#"); ok && frag != "" {
				b.anchors[u+"#"+frag] = loc
			}
		}
	}
	for _, kw := range []string{"$anchor", "$dynamicAnchor"} {
		if a, ok := m[kw].(string); ok && a != "" {
			if _, dup := b.anchors[base+"#"+a]; !dup {
				b.anchors[base+"#"+a] = loc
			}
		}
	}
	b.bases[loc.key()] = base
	jsonEachSubschema(m, loc.doc.draft, func(sub any, tokens ...string) {
		b.index(sub, loc.child(tokens...), base)
	})
}

// jsonEachSubschema calls f for every subschema of m, with the pointer
// tokens that lead to it.
func jsonEachSubschema(m map[string]any, draft int, f func(sub any, tokens ...string)) {
	for _, kw := range []string{"additionalProperties", "unevaluatedProperties", "propertyNames",
		"additionalItems", "unevaluatedItems", "contains", "not", "if", "then", "else", "contentSchema"} {
		if sub, ok := m[kw]; ok {
			f(sub, kw)
		}
	}
	for _, kw := range []string{"allOf", "anyOf", "oneOf", "prefixItems"} {
		if arr, ok := m[kw].([]any); ok {
			for i, sub := range arr {
				f(sub, kw, strconv.Itoa(i))
			}
		}
	}
	switch items := m["items"].(type) {
	case []any:
		for i, sub := range items {
			f(sub, "items", strconv.Itoa(i))
		}
	case nil:
	default:
		f(items, "items")
	}
	for _, kw := range []string{"properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies"} {
		if obj, ok := m[kw].(map[string]any); ok {
			for _, k := range jsonSortedKeys(obj) {
				if _, isArr := obj[k].([]any); isArr {
					continue // dependencies: ["a", "b"]
				}
				f(obj[k], kw, k)
			}
		}
	}
}

// lookup finds the value at loc.
func (b *jsonModelBuilder) lookup(loc jsonLoc) (any, bool) {
	v := loc.doc.raw
	if loc.ptr == "" {
		return v, true
	}
	for _, tok := range strings.Split(loc.ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[tok]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// resolve finds where ref, written where base is in effect, points.
func (b *jsonModelBuilder) resolve(ref, base string) (jsonLoc, bool) {
	bu, err := url.Parse(base)
	if err != nil {
		return jsonLoc{}, false
	}
	u, err := bu.Parse(ref)
	if err != nil {
		return jsonLoc{}, false
	}
	frag := u.Fragment
	u.Fragment, u.RawFragment = "", ""
	doc := u.String()
	var loc jsonLoc
	if d, ok := b.docs[doc]; ok {
		loc = jsonLoc{d, ""}
	} else if l, ok := b.ids[doc]; ok {
		loc = l
	} else {
		return jsonLoc{}, false
	}
	switch {
	case frag == "":
		return loc, true
	case strings.HasPrefix(frag, "/"):
		return jsonLoc{loc.doc, loc.ptr + frag}, true
	}
	l, ok := b.anchors[doc+"#"+frag]
	return l, ok
}

// node returns the node at loc, building it once.
func (b *jsonModelBuilder) node(loc jsonLoc) *jsonNode {
	key := loc.key()
	if n, ok := b.nodes[key]; ok {
		return n
	}
	n := &jsonNode{kind: jsonKindEmpty}
	b.nodes[key] = n // before the children: a $ref cycle ends here
	v, ok := b.lookup(loc)
	if !ok {
		return n
	}
	base, ok := b.bases[key]
	if !ok {
		base = loc.doc.url
	}
	switch v := v.(type) {
	case bool:
		if v {
			n.kind = jsonKindTrue
		} else {
			n.kind = jsonKindFalse
		}
	case map[string]any:
		b.object(n, v, loc, base)
	}
	return n
}

// object fills n from a schema object, the way everit's loader does: each
// keyword group that is present yields one part, and several parts make a
// synthetic allOf.
func (b *jsonModelBuilder) object(n *jsonNode, m map[string]any, loc jsonLoc, base string) {
	draft := loc.doc.draft
	var parts []*jsonNode
	for _, kw := range []string{"$ref", "$recursiveRef", "$dynamicRef"} {
		ref, ok := m[kw].(string)
		if !ok || (kw != "$ref" && draft < 2019) {
			continue
		}
		r := &jsonNode{kind: jsonKindRef}
		if target, ok := b.resolve(ref, base); ok {
			r.ref = b.node(target)
		}
		if draft < 2019 {
			// Before 2019-09 a $ref replaces its whole object.
			*n = *r
			return
		}
		parts = append(parts, r)
	}
	if vals, ok := m["enum"].([]any); ok {
		e := &jsonNode{kind: jsonKindEnum}
		for _, v := range vals {
			e.values = append(e.values, jsonCanonical(v))
		}
		parts = append(parts, e)
	}
	for _, crit := range []string{"allOf", "anyOf", "oneOf"} {
		arr, ok := m[crit].([]any)
		if !ok {
			continue
		}
		c := &jsonNode{kind: jsonKindCombined, criterion: crit}
		for i, sub := range arr {
			c.subschemas = append(c.subschemas, b.node(loc.child(crit, strconv.Itoa(i))))
			c.subKeys = append(c.subKeys, jsonCanonical(sub))
		}
		parts = append(parts, c)
	}
	if _, ok := m["not"]; ok {
		parts = append(parts, &jsonNode{kind: jsonKindNot, not: b.node(loc.child("not"))})
	}
	if v, ok := m["const"]; ok {
		parts = append(parts, &jsonNode{kind: jsonKindConst, values: []string{jsonCanonical(v)}})
	}
	if t, ok := m["type"]; ok {
		switch t := t.(type) {
		case string:
			parts = append(parts, b.typed(t, m, loc))
		case []any:
			c := &jsonNode{kind: jsonKindCombined, criterion: "anyOf"}
			for _, name := range t {
				if s, ok := name.(string); ok {
					c.subschemas = append(c.subschemas, b.typed(s, m, loc))
					c.subKeys = append(c.subKeys, "type:"+s)
				}
			}
			parts = append(parts, c)
		}
	} else {
		// No "type": each group of type-specific keywords present implies
		// a schema of that type which does not require the type.
		for _, t := range []string{"array", "object", "number", "string"} {
			if jsonHasAny(m, jsonTypeKeywords[t]) {
				parts = append(parts, b.typed(t, m, loc))
			}
		}
	}
	if _, ok := m["if"]; ok {
		c := &jsonNode{kind: jsonKindConditional, ifSchema: b.node(loc.child("if")), ifKey: jsonCanonical(m["if"])}
		if _, ok := m["then"]; ok {
			c.thenSchema = b.node(loc.child("then"))
		}
		if _, ok := m["else"]; ok {
			c.elseSchema = b.node(loc.child("else"))
		}
		parts = append(parts, c)
	}

	switch len(parts) {
	case 0:
	case 1:
		*n = *parts[0]
	default:
		n.kind = jsonKindCombined
		n.criterion = "allOf"
		n.synthetic = true
		n.subschemas = parts
		for i, p := range parts {
			n.subKeys = append(n.subKeys, fmt.Sprintf("part:%d:%d:%s", i, p.kind, p.criterion))
		}
	}
	if id, ok := m[jsonIDKeyword(draft)].(string); ok {
		n.id = id
	}
	n.title, _ = m["title"].(string)
	n.description, _ = m["description"].(string)
	if d, ok := m["default"]; ok {
		s := jsonCanonical(d)
		n.def = &s
	}
}

// jsonTypeKeywords are the keywords that imply a type when "type" is
// absent.
var jsonTypeKeywords = map[string][]string{
	"array": {"items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains",
		"prefixItems", "unevaluatedItems", "minContains", "maxContains"},
	"object": {"properties", "required", "minProperties", "maxProperties", "dependencies",
		"patternProperties", "additionalProperties", "propertyNames", "dependentRequired",
		"dependentSchemas", "unevaluatedProperties"},
	"number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
	"string": {"minLength", "maxLength", "pattern", "format"},
}

func jsonHasAny(m map[string]any, keys []string) bool {
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// typed builds the node of one type from the keywords of that type.
func (b *jsonModelBuilder) typed(t string, m map[string]any, loc jsonLoc) *jsonNode {
	switch t {
	case "string":
		n := &jsonNode{kind: jsonKindString, minLength: jsonRat(m["minLength"]), maxLength: jsonRat(m["maxLength"])}
		if p, ok := m["pattern"].(string); ok {
			n.pattern = &p
		}
		return n
	case "number", "integer":
		n := &jsonNode{kind: jsonKindNumber, integer: t == "integer", multipleOf: jsonRat(m["multipleOf"]),
			minimum: jsonRat(m["minimum"]), maximum: jsonRat(m["maximum"]),
			exclusiveMinimum: jsonRat(m["exclusiveMinimum"]), exclusiveMaximum: jsonRat(m["exclusiveMaximum"])}
		// draft-04: exclusiveMaximum: true makes maximum exclusive.
		if x, _ := m["exclusiveMaximum"].(bool); x {
			n.exclusiveMaximum, n.maximum = n.maximum, nil
		}
		if x, _ := m["exclusiveMinimum"].(bool); x {
			n.exclusiveMinimum, n.minimum = n.minimum, nil
		}
		return n
	case "boolean":
		return &jsonNode{kind: jsonKindBoolean}
	case "null":
		return &jsonNode{kind: jsonKindNull}
	case "object":
		return b.objectType(m, loc)
	case "array":
		return b.arrayType(m, loc)
	}
	return &jsonNode{kind: jsonKindEmpty}
}

func (b *jsonModelBuilder) objectType(m map[string]any, loc jsonLoc) *jsonNode {
	n := &jsonNode{kind: jsonKindObject, minProperties: jsonRat(m["minProperties"]), maxProperties: jsonRat(m["maxProperties"])}
	if props, ok := m["properties"].(map[string]any); ok {
		n.properties = make(map[string]*jsonNode, len(props))
		for k := range props {
			n.properties[k] = b.node(loc.child("properties", k))
		}
	}
	if req, ok := m["required"].([]any); ok {
		n.required = make(map[string]bool, len(req))
		for _, r := range req {
			if s, ok := r.(string); ok {
				n.required[s] = true
			}
		}
	}
	if pats, ok := m["patternProperties"].(map[string]any); ok {
		for _, p := range jsonSortedKeys(pats) {
			re, err := regexp.Compile(p)
			if err != nil {
				continue // the compiler has already rejected it
			}
			n.patternProperties = append(n.patternProperties,
				jsonPatternProperty{pattern: p, re: re, schema: b.node(loc.child("patternProperties", p))})
		}
	}
	additional := "additionalProperties"
	if _, ok := m[additional]; !ok {
		additional = "unevaluatedProperties"
	}
	switch a := m[additional].(type) {
	case bool:
		n.closedProperties = !a
	case map[string]any:
		n.additionalProperties = b.node(loc.child(additional))
	}
	deps := func(kw string) {
		obj, ok := m[kw].(map[string]any)
		if !ok {
			return
		}
		for k, v := range obj {
			if arr, ok := v.([]any); ok {
				if n.propertyDependencies == nil {
					n.propertyDependencies = map[string][]string{}
				}
				names := []string{}
				for _, a := range arr {
					if s, ok := a.(string); ok {
						names = append(names, s)
					}
				}
				n.propertyDependencies[k] = names
				continue
			}
			if n.schemaDependencies == nil {
				n.schemaDependencies = map[string]*jsonNode{}
			}
			n.schemaDependencies[k] = b.node(loc.child(kw, k))
		}
	}
	deps("dependencies")
	deps("dependentRequired")
	deps("dependentSchemas")
	if _, ok := m["propertyNames"]; ok {
		n.propertyNames = b.node(loc.child("propertyNames"))
	}
	return n
}

func (b *jsonModelBuilder) arrayType(m map[string]any, loc jsonLoc) *jsonNode {
	n := &jsonNode{kind: jsonKindArray, minItems: jsonRat(m["minItems"]), maxItems: jsonRat(m["maxItems"])}
	n.uniqueItems, _ = m["uniqueItems"].(bool)
	tuple := func(kw string, arr []any) {
		n.items = make([]*jsonNode, len(arr))
		for i := range arr {
			n.items[i] = b.node(loc.child(kw, strconv.Itoa(i)))
		}
	}
	// additional names the keyword that governs items past the tuple.
	additional := ""
	if loc.doc.draft >= 2020 {
		prefix, hasPrefix := m["prefixItems"].([]any)
		if hasPrefix {
			tuple("prefixItems", prefix)
		}
		switch m["items"].(type) {
		case nil:
		case map[string]any:
			if hasPrefix {
				additional = "items"
			} else {
				n.allItems = b.node(loc.child("items"))
			}
		default:
			additional = "items" // a boolean: items allowed at all or not
		}
	} else {
		switch items := m["items"].(type) {
		case nil:
		case []any:
			tuple("items", items)
		default:
			n.allItems = b.node(loc.child("items"))
		}
		if _, ok := m["additionalItems"]; ok {
			additional = "additionalItems"
		}
	}
	if additional == "" {
		if _, ok := m["unevaluatedItems"]; ok {
			additional = "unevaluatedItems"
		}
	}
	switch a := m[additional].(type) {
	case bool:
		n.closedItems = !a
	case map[string]any:
		n.additionalItems = b.node(loc.child(additional))
	}
	if _, ok := m["contains"]; ok {
		n.contains = b.node(loc.child("contains"))
		n.minContains = jsonRat(m["minContains"])
		n.maxContains = jsonRat(m["maxContains"])
	}
	return n
}

// jsonRat reads a numeric keyword; nil when absent or not a number.
func jsonRat(v any) *big.Rat {
	var s string
	switch v := v.(type) {
	case json.Number:
		s = v.String()
	case float64:
		s = strconv.FormatFloat(v, 'g', -1, 64)
	default:
		return nil
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return nil
	}
	return r
}

func jsonSortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
