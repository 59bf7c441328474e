package jsonfmt

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/semaq/semaq/internal/schema"
)

// The validator of santhosh-tekuri/jsonschema allocates per schema node
// and turns every number into a big.Rat through fmt; on a typical
// inference request that is most of the cost of a Validate. Most payloads
// are valid, so Validate first runs jsonFast, a compiled form of the same
// schema that can only say "valid": on anything else (invalid, or a case
// it does not decide cheaply) Validate asks the library, which then also
// explains the failure. The verdicts must agree; the tests and the fuzz
// target compare them.

// jsonFast is one compiled schema node. A nil *jsonFast accepts
// everything.
type jsonFast struct {
	always *bool // boolean schema
	types  uint8 // jsonFast* type bits; 0 = any type
	consts *any
	enum   []any
	format *jsonschema.Format
	ref    *jsonFast

	// object
	properties      map[string]*jsonFast
	patterns        []jsonFastPattern
	additional      *jsonFast
	noAdditional    bool
	required        []string
	minProps        int
	maxProps        int // -1: none
	depRequired     map[string][]string
	depSchemas      map[string]*jsonFast
	propertyNames   *jsonFast
	hasObjectChecks bool

	// array
	prefix          []*jsonFast
	rest            *jsonFast // items after the prefix
	noRest          bool
	minItems        int
	maxItems        int // -1: none
	unique          bool
	contains        *jsonFast
	minContains     int
	maxContains     int // -1: none
	hasArrayChecks  bool
	hasStringChecks bool

	// string
	minLength int
	maxLength int // -1: none
	pattern   jsonschema.Regexp

	// number
	minimum, maximum, exclusiveMinimum, exclusiveMaximum *jsonBound
	multipleOf                                           *big.Rat

	allOf, anyOf, oneOf []*jsonFast
	not                 *jsonFast
	ifs, then, els      *jsonFast
}

type jsonFastPattern struct {
	re     jsonschema.Regexp
	schema *jsonFast
}

// jsonBound is a numeric limit, exact and as a float for the quick test.
type jsonBound struct {
	rat *big.Rat
	f   float64
}

const (
	jsonFastNull uint8 = 1 << iota
	jsonFastBoolean
	jsonFastNumber
	jsonFastInteger
	jsonFastString
	jsonFastArray
	jsonFastObject
)

// jsonCompileFast compiles s, or reports false when s uses a feature the
// fast path does not implement (unevaluated*, dynamic references, content
// assertions, vocabularies): such schemas always use the library.
func jsonCompileFast(s *jsonschema.Schema) (f *jsonFast, ok bool) {
	c := jsonFastCompiler{done: map[*jsonschema.Schema]*jsonFast{}, ok: true}
	f = c.compile(s)
	if !c.ok || f == nil {
		return nil, false
	}
	return f, true
}

type jsonFastCompiler struct {
	done map[*jsonschema.Schema]*jsonFast
	ok   bool
}

func (c *jsonFastCompiler) compile(s *jsonschema.Schema) *jsonFast {
	if s == nil || !c.ok {
		return nil
	}
	if f, ok := c.done[s]; ok {
		return f
	}
	f := &jsonFast{maxProps: -1, maxItems: -1, maxContains: -1, maxLength: -1}
	c.done[s] = f
	if s.Bool != nil {
		f.always = s.Bool
		return f
	}
	if s.RecursiveRef != nil || s.DynamicRef != nil || s.UnevaluatedItems != nil || s.UnevaluatedProperties != nil ||
		len(s.Extensions) > 0 || s.ContentEncoding != nil || s.ContentMediaType != nil || s.ContentSchema != nil {
		c.ok = false
		return nil
	}
	f.ref = c.compile(s.Ref)
	if s.Ref != nil && s.DraftVersion < 2019 {
		return f // before 2019-09 the validator looks at nothing else
	}
	if s.Types != nil {
		for _, t := range s.Types.ToStrings() {
			f.types |= map[string]uint8{"null": jsonFastNull, "boolean": jsonFastBoolean, "number": jsonFastNumber,
				"integer": jsonFastInteger, "string": jsonFastString, "array": jsonFastArray, "object": jsonFastObject}[t]
		}
	}
	f.consts = s.Const
	if s.Enum != nil {
		f.enum = s.Enum.Values
	}
	f.format = s.Format

	// object
	if len(s.Properties) > 0 {
		f.properties = make(map[string]*jsonFast, len(s.Properties))
		for k, p := range s.Properties {
			f.properties[k] = c.compile(p)
		}
	}
	for re, p := range s.PatternProperties {
		f.patterns = append(f.patterns, jsonFastPattern{re, c.compile(p)})
	}
	switch a := s.AdditionalProperties.(type) {
	case bool:
		f.noAdditional = !a
	case *jsonschema.Schema:
		f.additional = c.compile(a)
	}
	f.required = s.Required
	f.minProps, f.maxProps = jsonIntOr(s.MinProperties, 0), jsonIntOr(s.MaxProperties, -1)
	for k, d := range s.Dependencies {
		switch d := d.(type) {
		case []string:
			f.addDepRequired(k, d)
		case *jsonschema.Schema:
			f.addDepSchema(k, c.compile(d))
		}
	}
	for k, d := range s.DependentRequired {
		f.addDepRequired(k, d)
	}
	for k, d := range s.DependentSchemas {
		f.addDepSchema(k, c.compile(d))
	}
	f.propertyNames = c.compile(s.PropertyNames)
	f.hasObjectChecks = f.properties != nil || f.patterns != nil || f.additional != nil || f.noAdditional ||
		len(f.required) > 0 || f.minProps > 0 || f.maxProps >= 0 || f.depRequired != nil || f.depSchemas != nil ||
		f.propertyNames != nil

	// array
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		f.rest = c.compile(items)
	case []*jsonschema.Schema:
		for _, it := range items {
			f.prefix = append(f.prefix, c.compile(it))
		}
		switch a := s.AdditionalItems.(type) {
		case bool:
			f.noRest = !a
		case *jsonschema.Schema:
			f.rest = c.compile(a)
		}
	}
	for _, it := range s.PrefixItems {
		f.prefix = append(f.prefix, c.compile(it))
	}
	if s.Items2020 != nil {
		f.rest = c.compile(s.Items2020)
	}
	f.minItems, f.maxItems = jsonIntOr(s.MinItems, 0), jsonIntOr(s.MaxItems, -1)
	f.unique = s.UniqueItems
	if s.Contains != nil {
		f.contains = c.compile(s.Contains)
		f.minContains, f.maxContains = jsonIntOr(s.MinContains, 1), jsonIntOr(s.MaxContains, -1)
	}
	f.hasArrayChecks = f.prefix != nil || f.rest != nil || f.noRest || f.minItems > 0 || f.maxItems >= 0 ||
		f.unique || s.Contains != nil

	// string
	f.minLength, f.maxLength = jsonIntOr(s.MinLength, 0), jsonIntOr(s.MaxLength, -1)
	f.pattern = s.Pattern
	f.hasStringChecks = f.minLength > 0 || f.maxLength >= 0 || f.pattern != nil

	// number
	f.minimum, f.maximum = jsonNewBound(s.Minimum), jsonNewBound(s.Maximum)
	f.exclusiveMinimum, f.exclusiveMaximum = jsonNewBound(s.ExclusiveMinimum), jsonNewBound(s.ExclusiveMaximum)
	f.multipleOf = s.MultipleOf

	for _, x := range s.AllOf {
		f.allOf = append(f.allOf, c.compile(x))
	}
	for _, x := range s.AnyOf {
		f.anyOf = append(f.anyOf, c.compile(x))
	}
	for _, x := range s.OneOf {
		f.oneOf = append(f.oneOf, c.compile(x))
	}
	f.not = c.compile(s.Not)
	f.ifs, f.then, f.els = c.compile(s.If), c.compile(s.Then), c.compile(s.Else)
	return f
}

func (f *jsonFast) addDepRequired(k string, names []string) {
	if f.depRequired == nil {
		f.depRequired = map[string][]string{}
	}
	f.depRequired[k] = append(f.depRequired[k], names...)
}

func (f *jsonFast) addDepSchema(k string, s *jsonFast) {
	if f.depSchemas == nil {
		f.depSchemas = map[string]*jsonFast{}
	}
	if prev, ok := f.depSchemas[k]; ok {
		// dependencies and dependentSchemas on one name: both apply.
		s = &jsonFast{maxProps: -1, maxItems: -1, maxContains: -1, maxLength: -1, allOf: []*jsonFast{prev, s}}
	}
	f.depSchemas[k] = s
}

func jsonIntOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

func jsonNewBound(r *big.Rat) *jsonBound {
	if r == nil {
		return nil
	}
	f, _ := r.Float64()
	return &jsonBound{rat: r, f: f}
}

// jsonFastMaxDepth bounds the recursion of one check; deeper payloads (or
// a $ref loop that consumes no input) are left to the library.
const jsonFastMaxDepth = 200

// jsonVerdict is the fast path's answer. Unknown is honest ignorance (too
// deep, too large to compare cheaply): it never becomes valid, and under
// "not" it never becomes invalid either.
type jsonVerdict uint8

const (
	jsonValid jsonVerdict = iota
	jsonInvalid
	jsonUnknown
	// jsonOverBudget: the step budget ran out (jsonSteps).
	jsonOverBudget
)

// and combines the verdicts of two keywords of one schema.
func (a jsonVerdict) and(b jsonVerdict) jsonVerdict { return max(a, b) }

// valid reports that v is certainly valid under f, within the default
// step budget.
func (f *jsonFast) valid(v any) bool {
	return f.validWithin(v, jsonStepBudget(schema.DefaultLimits, 0)) == jsonValid
}

// validWithin is valid visiting at most budget schema nodes: past it the
// answer is jsonOverBudget.
func (f *jsonFast) validWithin(v any, budget int) jsonVerdict {
	return f.check(v, 0, &jsonSteps{left: budget})
}

// jsonSteps counts the schema nodes one validation may still visit.
type jsonSteps struct{ left int }

// check is checkNode within the step budget. Once the budget is spent
// every verdict is jsonOverBudget: one computed after it may have
// counted a branch that was cut short.
func (f *jsonFast) check(v any, depth int, st *jsonSteps) jsonVerdict {
	if f == nil {
		return jsonValid
	}
	if st.left--; st.left < 0 {
		return jsonOverBudget
	}
	r := f.checkNode(v, depth, st)
	if st.left < 0 {
		return jsonOverBudget
	}
	return r
}

func (f *jsonFast) checkNode(v any, depth int, st *jsonSteps) jsonVerdict {
	if depth > jsonFastMaxDepth {
		return jsonUnknown
	}
	if f.always != nil {
		if *f.always {
			return jsonValid
		}
		return jsonInvalid
	}
	if f.types != 0 && !jsonFastTypeOK(f.types, v) {
		return jsonInvalid
	}
	if f.consts != nil && !jsonEqual(v, *f.consts) {
		return jsonInvalid
	}
	if f.enum != nil {
		found := false
		for _, e := range f.enum {
			if jsonEqual(v, e) {
				found = true
				break
			}
		}
		if !found {
			return jsonInvalid
		}
	}
	if f.format != nil && f.format.Validate(v) != nil {
		return jsonInvalid
	}
	r := f.ref.check(v, depth+1, st)
	if r == jsonInvalid {
		return r
	}
	switch x := v.(type) {
	case map[string]any:
		if f.hasObjectChecks {
			r = r.and(f.object(x, depth, st))
		}
	case []any:
		if f.hasArrayChecks {
			r = r.and(f.array(x, depth, st))
		}
	case string:
		if f.hasStringChecks && !f.str(x) {
			return jsonInvalid
		}
	case json.Number:
		if !f.number(x) {
			return jsonInvalid
		}
	case nil, bool:
	default:
		return jsonUnknown // not a decoded JSON value: the library says what
	}
	if r == jsonInvalid {
		return r
	}
	for _, s := range f.allOf {
		if r = r.and(s.check(v, depth+1, st)); r == jsonInvalid {
			return r
		}
	}
	if f.anyOf != nil {
		a := jsonInvalid
		for _, s := range f.anyOf {
			if c := s.check(v, depth+1, st); c != jsonInvalid {
				if a = c; a == jsonValid {
					break
				}
			}
		}
		if r = r.and(a); r == jsonInvalid {
			return r
		}
	}
	if f.oneOf != nil {
		matched, unknown := 0, 0
		for _, s := range f.oneOf {
			switch s.check(v, depth+1, st) {
			case jsonValid:
				matched++
			case jsonUnknown:
				unknown++
			}
		}
		switch {
		case matched > 1 || matched+unknown == 0:
			return jsonInvalid
		case unknown > 0:
			r = jsonUnknown
		}
	}
	if f.not != nil {
		switch f.not.check(v, depth+1, st) {
		case jsonValid:
			return jsonInvalid
		case jsonUnknown:
			r = jsonUnknown
		}
	}
	if f.ifs != nil {
		branch := f.els
		switch f.ifs.check(v, depth+1, st) {
		case jsonValid:
			branch = f.then
		case jsonUnknown:
			return jsonUnknown
		}
		if r = r.and(branch.check(v, depth+1, st)); r == jsonInvalid {
			return r
		}
	}
	return r
}

func jsonFastTypeOK(types uint8, v any) bool {
	switch x := v.(type) {
	case nil:
		return types&jsonFastNull != 0
	case bool:
		return types&jsonFastBoolean != 0
	case string:
		return types&jsonFastString != 0
	case []any:
		return types&jsonFastArray != 0
	case map[string]any:
		return types&jsonFastObject != 0
	case json.Number:
		if types&jsonFastNumber != 0 {
			return true
		}
		return types&jsonFastInteger != 0 && jsonIsInteger(x)
	}
	return false
}

func jsonIsInteger(n json.Number) bool {
	if !strings.ContainsAny(string(n), ".eE") {
		return true
	}
	r, ok := new(big.Rat).SetString(string(n))
	return ok && r.IsInt()
}

func (f *jsonFast) object(m map[string]any, depth int, st *jsonSteps) jsonVerdict {
	if len(m) < f.minProps || (f.maxProps >= 0 && len(m) > f.maxProps) {
		return jsonInvalid
	}
	for _, r := range f.required {
		if _, ok := m[r]; !ok {
			return jsonInvalid
		}
	}
	for k, deps := range f.depRequired {
		if _, ok := m[k]; ok {
			for _, r := range deps {
				if _, ok := m[r]; !ok {
					return jsonInvalid
				}
			}
		}
	}
	r := jsonValid
	for k, s := range f.depSchemas {
		if _, ok := m[k]; ok {
			if r = r.and(s.check(m, depth+1, st)); r == jsonInvalid {
				return r
			}
		}
	}
	for k, v := range m {
		evaluated := false
		if s, ok := f.properties[k]; ok {
			evaluated = true
			if r = r.and(s.check(v, depth+1, st)); r == jsonInvalid {
				return r
			}
		}
		for _, p := range f.patterns {
			if p.re.MatchString(k) {
				evaluated = true
				if r = r.and(p.schema.check(v, depth+1, st)); r == jsonInvalid {
					return r
				}
			}
		}
		if !evaluated {
			if f.noAdditional {
				return jsonInvalid
			}
			if r = r.and(f.additional.check(v, depth+1, st)); r == jsonInvalid {
				return r
			}
		}
		if f.propertyNames != nil {
			if r = r.and(f.propertyNames.check(k, depth+1, st)); r == jsonInvalid {
				return r
			}
		}
	}
	return r
}

func (f *jsonFast) array(a []any, depth int, st *jsonSteps) jsonVerdict {
	if len(a) < f.minItems || (f.maxItems >= 0 && len(a) > f.maxItems) {
		return jsonInvalid
	}
	r := jsonValid
	if f.unique {
		if len(a) > 64 {
			r = jsonUnknown // quadratic here; the library hashes
		} else {
			for i := range a {
				for j := i + 1; j < len(a); j++ {
					if jsonEqual(a[i], a[j]) {
						return jsonInvalid
					}
				}
			}
		}
	}
	for i, v := range a {
		s := f.rest
		if i < len(f.prefix) {
			s = f.prefix[i]
		} else if f.noRest {
			return jsonInvalid
		}
		if r = r.and(s.check(v, depth+1, st)); r == jsonInvalid {
			return r
		}
	}
	if f.contains != nil {
		matched, unknown := 0, 0
		for _, v := range a {
			switch f.contains.check(v, depth+1, st) {
			case jsonValid:
				matched++
			case jsonUnknown:
				unknown++
			}
		}
		switch {
		case matched+unknown < f.minContains || (f.maxContains >= 0 && matched > f.maxContains):
			return jsonInvalid
		case matched < f.minContains || (f.maxContains >= 0 && matched+unknown > f.maxContains):
			r = jsonUnknown
		}
	}
	return r
}

func (f *jsonFast) str(s string) bool {
	if f.minLength > 0 || f.maxLength >= 0 {
		n := utf8.RuneCountInString(s)
		if n < f.minLength || (f.maxLength >= 0 && n > f.maxLength) {
			return false
		}
	}
	return f.pattern == nil || f.pattern.MatchString(s)
}

func (f *jsonFast) number(n json.Number) bool {
	if f.minimum != nil && jsonCompare(n, f.minimum) < 0 {
		return false
	}
	if f.maximum != nil && jsonCompare(n, f.maximum) > 0 {
		return false
	}
	if f.exclusiveMinimum != nil && jsonCompare(n, f.exclusiveMinimum) <= 0 {
		return false
	}
	if f.exclusiveMaximum != nil && jsonCompare(n, f.exclusiveMaximum) >= 0 {
		return false
	}
	if f.multipleOf != nil {
		r, ok := new(big.Rat).SetString(string(n))
		if !ok || !r.Quo(r, f.multipleOf).IsInt() {
			return false
		}
	}
	return true
}

// jsonCompare compares n with b exactly. The float comparison decides
// whenever the two are further apart than float rounding could move them;
// otherwise the exact rationals decide.
func jsonCompare(n json.Number, b *jsonBound) int {
	if x, err := strconv.ParseFloat(string(n), 64); err == nil {
		scale := math.Max(1, math.Max(math.Abs(x), math.Abs(b.f)))
		if d := x - b.f; d > 1e-9*scale {
			return 1
		} else if d < -1e-9*scale {
			return -1
		}
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return 0
	}
	return r.Cmp(b.rat)
}

// jsonEqual is JSON equality: numbers by value, objects by members.
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && a == y
	case string:
		y, ok := b.(string)
		return ok && a == y
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == y {
			return true
		}
		x, okx := new(big.Rat).SetString(string(a))
		z, okz := new(big.Rat).SetString(string(y))
		return okx && okz && x.Cmp(z) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(a) != len(y) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(a) != len(y) {
			return false
		}
		for k, v := range a {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	}
	return false
}
