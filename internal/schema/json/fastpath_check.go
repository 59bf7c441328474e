package jsonfmt

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"unicode/utf8"
)

// The compiled schema (jsonFast) checked against a tape (fastpath_tape.go)
// instead of a decoded value. Each function here mirrors its counterpart
// in json_validate.go keyword for keyword, verdict for verdict and step
// for step, so the byte path reaches the decoded path's verdict within
// the same budget: only the way a value is read differs.

// validBytes reports whether payload is certainly valid under s, read
// through a tape. False means "not decided here": the caller takes the
// decoding path, which decides and explains.
func (s *jsonSchema) validBytes(payload []byte) bool {
	if s.fast == nil {
		return false
	}
	t := jsonGetTape()
	defer jsonPutTape(t)
	if !t.read(payload, s.limits) {
		return false
	}
	st := jsonSteps{left: jsonStepBudget(s.limits, t.values)}
	return s.fast.tcheck(t, 0, 0, &st) == jsonValid
}

// tcheck is check on token v of t.
func (f *jsonFast) tcheck(t *jsonTape, v int32, depth int, st *jsonSteps) jsonVerdict {
	if f == nil {
		return jsonValid
	}
	if st.left--; st.left < 0 {
		return jsonOverBudget
	}
	r := f.tcheckNode(t, v, depth, st)
	if st.left < 0 {
		return jsonOverBudget
	}
	return r
}

func (f *jsonFast) tcheckNode(t *jsonTape, v int32, depth int, st *jsonSteps) jsonVerdict {
	if depth > jsonFastMaxDepth {
		return jsonUnknown
	}
	if f.always != nil {
		if *f.always {
			return jsonValid
		}
		return jsonInvalid
	}
	if f.types != 0 && !jsonTapeTypeOK(f.types, t, v) {
		return jsonInvalid
	}
	if f.consts != nil && !t.equal(v, *f.consts) {
		return jsonInvalid
	}
	if f.enum != nil {
		found := false
		for _, e := range f.enum {
			if t.equal(v, e) {
				found = true
				break
			}
		}
		if !found {
			return jsonInvalid
		}
	}
	if f.format != nil && f.format.Validate(t.any(v)) != nil {
		return jsonInvalid
	}
	r := f.ref.tcheck(t, v, depth+1, st)
	if r == jsonInvalid {
		return r
	}
	switch t.toks[v].kind {
	case jsonTokObject:
		if f.hasObjectChecks {
			r = r.and(f.tobject(t, v, depth, st))
		}
	case jsonTokArray:
		if f.hasArrayChecks {
			r = r.and(f.tarray(t, v, depth, st))
		}
	case jsonTokString:
		if f.hasStringChecks && !f.tstr(t, v) {
			return jsonInvalid
		}
	case jsonTokNumber:
		if !f.tnumber(t.raw(v)) {
			return jsonInvalid
		}
	}
	if r == jsonInvalid {
		return r
	}
	for _, s := range f.allOf {
		if r = r.and(s.tcheck(t, v, depth+1, st)); r == jsonInvalid {
			return r
		}
	}
	if f.anyOf != nil {
		a := jsonInvalid
		for _, s := range f.anyOf {
			if c := s.tcheck(t, v, depth+1, st); c != jsonInvalid {
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
			switch s.tcheck(t, v, depth+1, st) {
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
		switch f.not.tcheck(t, v, depth+1, st) {
		case jsonValid:
			return jsonInvalid
		case jsonUnknown:
			r = jsonUnknown
		}
	}
	if f.ifs != nil {
		branch := f.els
		switch f.ifs.tcheck(t, v, depth+1, st) {
		case jsonValid:
			branch = f.then
		case jsonUnknown:
			return jsonUnknown
		}
		if r = r.and(branch.tcheck(t, v, depth+1, st)); r == jsonInvalid {
			return r
		}
	}
	return r
}

func jsonTapeTypeOK(types uint8, t *jsonTape, v int32) bool {
	switch t.toks[v].kind {
	case jsonTokNull:
		return types&jsonFastNull != 0
	case jsonTokFalse, jsonTokTrue:
		return types&jsonFastBoolean != 0
	case jsonTokString:
		return types&jsonFastString != 0
	case jsonTokArray:
		return types&jsonFastArray != 0
	case jsonTokObject:
		return types&jsonFastObject != 0
	}
	if types&jsonFastNumber != 0 {
		return true
	}
	return types&jsonFastInteger != 0 && t.isInteger(v)
}

func (t *jsonTape) isInteger(v int32) bool {
	if t.toks[v].flags&jsonTokFraction == 0 {
		return true
	}
	r, ok := new(big.Rat).SetString(string(t.raw(v)))
	return ok && r.IsInt()
}

// member returns the token of the object obj's member named name, or -1.
func (t *jsonTape) member(obj int32, name string) int32 {
	at := obj + 1
	for range t.toks[obj].n {
		if t.equalsString(at, name) {
			return at + 1
		}
		at = t.toks[at+1].next
	}
	return -1
}

// jsonTapeMaxLookups bounds the key comparisons of one object's name
// lookups (required, dependencies: each a walk over the members), so a
// schema with thousands of required names and a payload with thousands of
// keys cannot make a quadratic amount of work. Past it the object is
// left to the decoding path, which looks names up in a map.
const jsonTapeMaxLookups = 4096

// jsonTapeMaxUnique bounds the tokens of an array whose uniqueItems the
// byte path decides: comparing every pair costs at most the square of it.
const jsonTapeMaxUnique = 256

func (f *jsonFast) tobject(t *jsonTape, v int32, depth int, st *jsonSteps) jsonVerdict {
	n := int(t.toks[v].n)
	if n < f.minProps || (f.maxProps >= 0 && n > f.maxProps) {
		return jsonInvalid
	}
	if n*f.lookups() > jsonTapeMaxLookups {
		return jsonUnknown
	}
	for _, r := range f.required {
		if t.member(v, r) < 0 {
			return jsonInvalid
		}
	}
	for k, deps := range f.depRequired {
		if t.member(v, k) >= 0 {
			for _, r := range deps {
				if t.member(v, r) < 0 {
					return jsonInvalid
				}
			}
		}
	}
	r := jsonValid
	for k, s := range f.depSchemas {
		if t.member(v, k) >= 0 {
			if r = r.and(s.tcheck(t, v, depth+1, st)); r == jsonInvalid {
				return r
			}
		}
	}
	key := v + 1
	for range n {
		val := key + 1
		evaluated := false
		var s *jsonFast
		var ok bool
		if t.toks[key].flags&jsonTokDecode == 0 {
			s, ok = f.properties[string(t.raw(key))] // no allocation for a lookup
		} else {
			s, ok = f.properties[t.text(key)]
		}
		if ok {
			evaluated = true
			if r = r.and(s.tcheck(t, val, depth+1, st)); r == jsonInvalid {
				return r
			}
		}
		for _, p := range f.patterns {
			if t.matches(p.re, key) {
				evaluated = true
				if r = r.and(p.schema.tcheck(t, val, depth+1, st)); r == jsonInvalid {
					return r
				}
			}
		}
		if !evaluated {
			if f.noAdditional {
				return jsonInvalid
			}
			if r = r.and(f.additional.tcheck(t, val, depth+1, st)); r == jsonInvalid {
				return r
			}
		}
		if f.propertyNames != nil {
			if r = r.and(f.propertyNames.check(t.text(key), depth+1, st)); r == jsonInvalid {
				return r
			}
		}
		key = t.toks[val].next
	}
	return r
}

// lookups is how many member names tobject looks up in one object.
func (f *jsonFast) lookups() int {
	n := len(f.required) + len(f.depRequired) + len(f.depSchemas)
	for _, deps := range f.depRequired {
		n += len(deps)
	}
	return n
}

// jsonBytesMatcher is a Regexp that matches bytes without a copy
// (*regexp.Regexp, the library's default engine).
type jsonBytesMatcher interface{ Match([]byte) bool }

// matches runs re on string token i.
func (t *jsonTape) matches(re interface{ MatchString(string) bool }, i int32) bool {
	if m, ok := re.(jsonBytesMatcher); ok && t.toks[i].flags&jsonTokDecode == 0 {
		return m.Match(t.raw(i))
	}
	return re.MatchString(t.text(i))
}

func (f *jsonFast) tarray(t *jsonTape, v int32, depth int, st *jsonSteps) jsonVerdict {
	n := int(t.toks[v].n)
	if n < f.minItems || (f.maxItems >= 0 && n > f.maxItems) {
		return jsonInvalid
	}
	r := jsonValid
	if f.unique {
		if n > 64 || t.toks[v].next-v > jsonTapeMaxUnique {
			r = jsonUnknown // quadratic here; the library hashes
		} else {
			for a := v + 1; a < t.toks[v].next; a = t.toks[a].next {
				for b := t.toks[a].next; b < t.toks[v].next; b = t.toks[b].next {
					if t.same(a, b) {
						return jsonInvalid
					}
				}
			}
		}
	}
	item := v + 1
	for i := range n {
		s := f.rest
		if i < len(f.prefix) {
			s = f.prefix[i]
		} else if f.noRest {
			return jsonInvalid
		}
		if r = r.and(s.tcheck(t, item, depth+1, st)); r == jsonInvalid {
			return r
		}
		item = t.toks[item].next
	}
	if f.contains != nil {
		matched, unknown := 0, 0
		for item := v + 1; item < t.toks[v].next; item = t.toks[item].next {
			switch f.contains.tcheck(t, item, depth+1, st) {
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

func (f *jsonFast) tstr(t *jsonTape, v int32) bool {
	if f.minLength > 0 || f.maxLength >= 0 {
		var n int
		switch k := &t.toks[v]; {
		case k.flags&jsonTokASCII != 0:
			n = int(k.end - k.start)
		case k.flags&jsonTokDecode != 0:
			n = utf8.RuneCountInString(t.text(v))
		default: // valid UTF-8, no escapes
			n = utf8.RuneCount(t.raw(v))
		}
		if n < f.minLength || (f.maxLength >= 0 && n > f.maxLength) {
			return false
		}
	}
	return f.pattern == nil || t.matches(f.pattern, v)
}

func (f *jsonFast) tnumber(lit []byte) bool {
	if f.minimum == nil && f.maximum == nil && f.exclusiveMinimum == nil && f.exclusiveMaximum == nil && f.multipleOf == nil {
		return true
	}
	x, err := strconv.ParseFloat(string(lit), 64)
	exact := err == nil
	if f.minimum != nil && jsonCompareLiteral(lit, x, exact, f.minimum) < 0 {
		return false
	}
	if f.maximum != nil && jsonCompareLiteral(lit, x, exact, f.maximum) > 0 {
		return false
	}
	if f.exclusiveMinimum != nil && jsonCompareLiteral(lit, x, exact, f.exclusiveMinimum) <= 0 {
		return false
	}
	if f.exclusiveMaximum != nil && jsonCompareLiteral(lit, x, exact, f.exclusiveMaximum) >= 0 {
		return false
	}
	if f.multipleOf != nil {
		r, ok := new(big.Rat).SetString(string(lit))
		if !ok || !r.Quo(r, f.multipleOf).IsInt() {
			return false
		}
	}
	return true
}

// jsonCompareLiteral is jsonCompare on a literal already parsed as x
// (parsed: ParseFloat succeeded).
func jsonCompareLiteral(lit []byte, x float64, parsed bool, b *jsonBound) int {
	if parsed {
		scale := math.Max(1, math.Max(math.Abs(x), math.Abs(b.f)))
		if d := x - b.f; d > 1e-9*scale {
			return 1
		} else if d < -1e-9*scale {
			return -1
		}
	}
	r, ok := new(big.Rat).SetString(string(lit))
	if !ok {
		return 0
	}
	return r.Cmp(b.rat)
}

// equal is jsonEqual between token v and a decoded value b (a const or
// enum value of the schema).
func (t *jsonTape) equal(v int32, b any) bool {
	k := &t.toks[v]
	switch k.kind {
	case jsonTokNull:
		return b == nil
	case jsonTokFalse, jsonTokTrue:
		y, ok := b.(bool)
		return ok && y == (k.kind == jsonTokTrue)
	case jsonTokString:
		y, ok := b.(string)
		return ok && t.equalsString(v, y)
	case jsonTokNumber:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if string(t.raw(v)) == string(y) {
			return true
		}
		x, okx := new(big.Rat).SetString(string(t.raw(v)))
		z, okz := new(big.Rat).SetString(string(y))
		return okx && okz && x.Cmp(z) == 0
	case jsonTokArray:
		y, ok := b.([]any)
		if !ok || int(k.n) != len(y) {
			return false
		}
		item := v + 1
		for i := range y {
			if !t.equal(item, y[i]) {
				return false
			}
			item = t.toks[item].next
		}
		return true
	case jsonTokObject:
		y, ok := b.(map[string]any)
		if !ok || int(k.n) != len(y) {
			return false
		}
		key := v + 1
		for range k.n {
			w, ok := y[t.text(key)]
			if !ok || !t.equal(key+1, w) {
				return false
			}
			key = t.toks[key+1].next
		}
		return true
	}
	return false
}

// same is jsonEqual between two tokens of the tape.
func (t *jsonTape) same(a, b int32) bool {
	ka, kb := &t.toks[a], &t.toks[b]
	if ka.kind != kb.kind {
		return false
	}
	switch ka.kind {
	case jsonTokNull, jsonTokFalse, jsonTokTrue:
		return true
	case jsonTokString:
		return t.sameString(a, b)
	case jsonTokNumber:
		if string(t.raw(a)) == string(t.raw(b)) {
			return true
		}
		x, okx := new(big.Rat).SetString(string(t.raw(a)))
		z, okz := new(big.Rat).SetString(string(t.raw(b)))
		return okx && okz && x.Cmp(z) == 0
	case jsonTokArray:
		if ka.n != kb.n {
			return false
		}
		for x, y := a+1, b+1; x < ka.next; x, y = t.toks[x].next, t.toks[y].next {
			if !t.same(x, y) {
				return false
			}
		}
		return true
	case jsonTokObject:
		if ka.n != kb.n {
			return false
		}
		key := a + 1
		for range ka.n {
			w := t.member(b, t.text(key))
			if w < 0 || !t.same(key+1, w) {
				return false
			}
			key = t.toks[key+1].next
		}
		return true
	}
	return false
}
