package jsonfmt

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

// The fast path (jsonFast, json_validate.go and fastpath_check.go)
// re-implements every keyword it compiles beside the library that is the
// reference. FuzzFastPathAgreesWithValidator builds schemas from those
// keywords only, in every draft SemaQ reads, with instances drawn from
// the same few values the schemas name, and requires the fast path, on
// decoded values and on the tape, to reach the library's verdict on
// each: a keyword the two read differently shows as a pair they disagree
// on. The seed corpus (testdata/fuzz/FuzzFastPathAgreesWithValidator)
// covers every keyword and draft (TestFastPathCorpusCoversKeywords).

// fastDraft is one draft the generator writes: its number, as
// jsonschema.Schema.DraftVersion has it, and its "$schema" ("" for none:
// draft-07, jsonDefaultDraft).
type fastDraft struct {
	name    string
	version int
	uri     string
}

var fastDrafts = []fastDraft{
	{"draft-04", 4, "http://json-schema.org/draft-04/schema#"},
	{"draft-06", 6, "http://json-schema.org/draft-06/schema#"},
	{"draft-07", 7, "http://json-schema.org/draft-07/schema#"},
	{"default draft", 7, ""},
	{"2019-09", 2019, "https://json-schema.org/draft/2019-09/schema"},
	{"2020-12", 2020, "https://json-schema.org/draft/2020-12/schema"},
}

// fastGen turns fuzz bytes into choices (jsonGen.pick: 0 once the bytes
// run out) and records which keywords and drafts it wrote.
type fastGen struct {
	jsonGen
	draft fastDraft
	inDef bool // writing the definition: no $ref
	used  map[string]bool
}

func newFastGen(b []byte) *fastGen {
	return &fastGen{jsonGen: jsonGen{b: b}, used: map[string]bool{}}
}

// more reports whether choices are left in the bytes.
func (g *fastGen) more() bool { return g.i < len(g.b) }

// The values schemas and instances share, so that enum, const, required,
// the bounds and the patterns meet instances they accept and ones they
// refuse. fastKeys and fastStrings are JSON texts; fastSchemaStrings
// are the ones a schema may hold (valid UTF-8).
var (
	fastKeys = []string{`"a"`, `"b"`, `"c"`, `"é"`, `"x-1"`}
	// fastInstanceKeys adds keys written with escapes, and what they
	// decode to.
	fastInstanceKeys = append(append([]string{}, fastKeys...), `"\u0061"`, `"\u00e9"`)
	fastKeyValue     = map[string]string{`"\u0061"`: `"a"`, `"\u00e9"`: `"é"`}
	fastNumbers      = []string{`0`, `-0`, `1`, `1.0`, `2`, `2.5`, `-3`, `3`, `0.5`, `0.1`, `1e2`, `2.5E-1`, `10`, `-1e-7`,
		`100.00000000000001`, `12345678901234567890`, `3.0000000000000000001`}
	fastSchemaStrings = []string{`""`, `"a"`, `"ab"`, `"abc"`, `"é"`, `"日本語"`, `"x-1"`, `"a\"b"`, `"\n"`,
		`"a@b.example"`, `"127.0.0.1"`, `"2024-01-02"`, `"2024-02-30"`, `"http://x.example/a"`, `"^a("`,
		`"[a-c]+"`, `"aaaa"`}
	fastStrings = append(append([]string{}, fastSchemaStrings...), `"\u00e9"`, `"\u0061b"`, `"\ud83d\ude00"`,
		`"\ud800"`, `"\u0000"`, "\"\xff\"", `"a\/b"`)
	fastPatterns = []string{`^a`, `b$`, `^[a-c]*$`, `é`, `^x-`, `\\d`, `^.$`}
	fastTypes    = []string{`"null"`, `"boolean"`, `"number"`, `"integer"`, `"string"`, `"array"`, `"object"`,
		`["integer","null"]`, `["string","array"]`, `["number","object","boolean"]`}
	fastFormats = []string{`"email"`, `"ipv4"`, `"date"`, `"uri"`, `"regex"`, `"date-time"`, `"hostname"`,
		`"uuid"`, `"no-such-format"`}
	fastMultiples = []string{`2`, `0.5`, `0.1`, `3`, `1e-2`}
)

// fastKeyword is a keyword of the fast path, in the drafts that have it
// (from..to by DraftVersion; to 0: every later one). write returns its
// members: a keyword that only means something beside another (then,
// additionalItems, minContains...) writes both.
type fastKeyword struct {
	name     string
	from, to int
	write    func(g *fastGen, depth int, descended bool) []string
}

// fastKeywords is every keyword jsonCompileFast compiles, and the
// annotations it ignores; the rest (unevaluated*, $dynamicRef,
// $recursiveRef, content*) send a schema to the library alone.
var fastKeywords []fastKeyword

func init() {
	member := func(name, value string) []string { return []string{`"` + name + `":` + value} }
	pool := func(name string, values []string) func(*fastGen, int, bool) []string {
		return func(g *fastGen, _ int, _ bool) []string { return member(name, values[g.pick(len(values))]) }
	}
	small := func(name string) func(*fastGen, int, bool) []string {
		return func(g *fastGen, _ int, _ bool) []string { return member(name, fmt.Sprint(g.pick(4))) }
	}
	descend := func(name string) func(*fastGen, int, bool) []string {
		return func(g *fastGen, depth int, _ bool) []string { return member(name, g.sub(depth, true)) }
	}
	inPlace := func(name string) func(*fastGen, int, bool) []string {
		return func(g *fastGen, depth int, descended bool) []string { return member(name, g.sub(depth, descended)) }
	}
	list := func(name string, desc bool) func(*fastGen, int, bool) []string {
		return func(g *fastGen, depth int, descended bool) []string {
			return member(name, g.list(depth, desc || descended))
		}
	}
	fastKeywords = []fastKeyword{
		{"type", 4, 0, pool("type", fastTypes)},
		{"enum", 4, 0, func(g *fastGen, _ int, _ bool) []string {
			a, b := g.constant(), g.constant()
			if a == b {
				return member("enum", "["+a+"]")
			}
			return member("enum", "["+a+","+b+"]")
		}},
		{"const", 6, 0, func(g *fastGen, _ int, _ bool) []string { return member("const", g.constant()) }},
		{"format", 4, 0, pool("format", fastFormats)},
		{"properties", 4, 0, func(g *fastGen, depth int, _ bool) []string {
			k := fastKeys[g.pick(len(fastKeys))]
			return member("properties", "{"+k+":"+g.sub(depth, true)+`,"z":`+g.sub(depth, true)+"}")
		}},
		{"patternProperties", 4, 0, func(g *fastGen, depth int, _ bool) []string {
			return member("patternProperties", `{"`+fastPatterns[g.pick(len(fastPatterns))]+`":`+g.sub(depth, true)+"}")
		}},
		{"additionalProperties", 4, 0, func(g *fastGen, depth int, _ bool) []string {
			if g.pick(2) == 0 {
				return member("additionalProperties", []string{"true", "false"}[g.pick(2)])
			}
			return member("additionalProperties", g.sub(depth, true))
		}},
		{"required", 4, 0, func(g *fastGen, _ int, _ bool) []string { return member("required", g.names()) }},
		{"minProperties", 4, 0, small("minProperties")},
		{"maxProperties", 4, 0, small("maxProperties")},
		{"dependencies", 4, 7, func(g *fastGen, depth int, descended bool) []string {
			k := fastKeys[g.pick(len(fastKeys))]
			if g.pick(2) == 0 {
				return member("dependencies", "{"+k+":"+g.names()+"}")
			}
			return member("dependencies", "{"+k+":"+g.sub(depth, descended)+"}")
		}},
		{"propertyNames", 6, 0, descend("propertyNames")},
		{"dependentRequired", 2019, 0, func(g *fastGen, _ int, _ bool) []string {
			return member("dependentRequired", "{"+fastKeys[g.pick(len(fastKeys))]+":"+g.names()+"}")
		}},
		{"dependentSchemas", 2019, 0, func(g *fastGen, depth int, descended bool) []string {
			return member("dependentSchemas", "{"+fastKeys[g.pick(len(fastKeys))]+":"+g.sub(depth, descended)+"}")
		}},
		{"items", 4, 0, descend("items")},
		{"items (array)", 4, 2019, list("items", true)},
		{"additionalItems", 4, 2019, func(g *fastGen, depth int, _ bool) []string {
			add := []string{"true", "false"}[g.pick(2)]
			if g.pick(2) == 0 {
				add = g.sub(depth, true)
			}
			return append(member("items", g.list(depth, true)), member("additionalItems", add)...)
		}},
		{"prefixItems", 2020, 0, list("prefixItems", true)},
		{"minItems", 4, 0, small("minItems")},
		{"maxItems", 4, 0, small("maxItems")},
		{"uniqueItems", 4, 0, pool("uniqueItems", []string{"true", "false"})},
		{"contains", 6, 0, descend("contains")},
		{"minContains", 2019, 0, func(g *fastGen, depth int, _ bool) []string {
			return append(member("contains", g.sub(depth, true)), member("minContains", fmt.Sprint(g.pick(3)))...)
		}},
		{"maxContains", 2019, 0, func(g *fastGen, depth int, _ bool) []string {
			return append(member("contains", g.sub(depth, true)), member("maxContains", fmt.Sprint(g.pick(3)))...)
		}},
		{"minLength", 4, 0, small("minLength")},
		{"maxLength", 4, 0, small("maxLength")},
		{"pattern", 4, 0, func(g *fastGen, _ int, _ bool) []string {
			return member("pattern", `"`+fastPatterns[g.pick(len(fastPatterns))]+`"`)
		}},
		{"minimum", 4, 0, pool("minimum", fastNumbers)},
		{"maximum", 4, 0, pool("maximum", fastNumbers)},
		{"exclusiveMinimum", 6, 0, pool("exclusiveMinimum", fastNumbers)},
		{"exclusiveMaximum", 6, 0, pool("exclusiveMaximum", fastNumbers)},
		// Draft-04's exclusive bounds are booleans beside the bound.
		{"exclusiveMinimum (boolean)", 4, 4, func(g *fastGen, _ int, _ bool) []string {
			return append(member("minimum", fastNumbers[g.pick(len(fastNumbers))]),
				member("exclusiveMinimum", []string{"true", "false"}[g.pick(2)])...)
		}},
		{"exclusiveMaximum (boolean)", 4, 4, func(g *fastGen, _ int, _ bool) []string {
			return append(member("maximum", fastNumbers[g.pick(len(fastNumbers))]),
				member("exclusiveMaximum", []string{"true", "false"}[g.pick(2)])...)
		}},
		{"multipleOf", 4, 0, pool("multipleOf", fastMultiples)},
		{"allOf", 4, 0, list("allOf", false)},
		{"anyOf", 4, 0, list("anyOf", false)},
		{"oneOf", 4, 0, list("oneOf", false)},
		{"not", 4, 0, inPlace("not")},
		{"if", 7, 0, func(g *fastGen, depth int, descended bool) []string {
			m := member("if", g.sub(depth, descended))
			switch g.pick(4) {
			case 0:
				return m
			case 1:
				return append(m, member("then", g.sub(depth, descended))...)
			case 2:
				return append(m, member("else", g.sub(depth, descended))...)
			}
			return append(append(m, member("then", g.sub(depth, descended))...), member("else", g.sub(depth, descended))...)
		}},
		{"$ref", 4, 0, func(g *fastGen, _ int, descended bool) []string {
			// "#" only below a keyword that descends into the instance:
			// every $ref loop then consumes input, and both validators
			// decide (the library refuses a loop that does not).
			if descended && g.pick(3) == 0 {
				return member("$ref", `"#"`)
			}
			return member("$ref", `"`+g.defs()+`"`)
		}},
		{"annotations", 4, 0, func(g *fastGen, _ int, _ bool) []string {
			m := append(member("title", `"t"`), member("description", `"d"`)...)
			m = append(m, member("default", g.constant())...)
			if g.draft.version >= 6 {
				m = append(m, member("examples", "["+g.constant()+"]")...)
			}
			if g.draft.version >= 7 {
				m = append(m, member("$comment", `"c"`)...)
			}
			return m
		}},
	}
}

// defs is the pointer to the one local definition, "d".
func (g *fastGen) defs() string {
	if g.draft.version >= 2019 {
		return "#/$defs/d"
	}
	return "#/definitions/d"
}

// document writes a schema in a draft the bytes choose, with one local
// definition "d" (the target of every $ref but "#", and itself without
// one, so no $ref loop skips the instance).
func (g *fastGen) document() string {
	g.draft = fastDrafts[g.pick(len(fastDrafts))]
	g.used[g.draft.name] = true
	root := g.schema(2, false)
	g.inDef = true
	def := g.schema(1, false)
	g.inDef = false
	head := "{"
	if g.draft.uri != "" {
		head += `"$schema":"` + g.draft.uri + `",`
	}
	defsKey := "definitions"
	if g.draft.version >= 2019 {
		defsKey = "$defs"
	}
	head += `"` + defsKey + `":{"d":` + def + "}"
	if !strings.HasPrefix(root, "{") {
		return head + `,"allOf":[` + root + "]}"
	}
	if root == "{}" {
		return head + "}"
	}
	return head + "," + root[1:]
}

// schema writes a schema of at most depth more levels of subschemas.
// descended: a keyword that applies subschemas to what the instance holds
// (items, properties...) lies between the root and here.
func (g *fastGen) schema(depth int, descended bool) string {
	if g.draft.version >= 6 && g.pick(10) == 0 {
		b := []string{"true", "false"}[g.pick(2)]
		g.used[b] = true
		return b
	}
	var avail []*fastKeyword
	for i := range fastKeywords {
		k := &fastKeywords[i]
		if g.draft.version < k.from || (k.to != 0 && g.draft.version > k.to) || (k.name == "$ref" && g.inDef) {
			continue
		}
		avail = append(avail, k)
	}
	var members []string
	seen := map[string]bool{}
	for range 1 + g.pick(4) {
		k := avail[g.pick(len(avail))]
		ms := k.write(g, depth-1, descended)
		clash := false
		for _, m := range ms {
			clash = clash || seen[m[:strings.Index(m, `":`)]]
		}
		if clash {
			continue
		}
		for _, m := range ms {
			seen[m[:strings.Index(m, `":`)]] = true
		}
		members = append(members, ms...)
		g.used[k.name] = true
	}
	return "{" + strings.Join(members, ",") + "}"
}

// sub writes a subschema: a small leaf once depth is spent.
func (g *fastGen) sub(depth int, descended bool) string {
	if depth <= 0 {
		leaves := []string{`{}`, `{"type":"string"}`, `{"minimum":1}`, `{"required":["a"]}`, `{"maxItems":1}`}
		if g.draft.version >= 6 {
			leaves = append(leaves, `true`, `false`)
		}
		return leaves[g.pick(len(leaves))]
	}
	return g.schema(depth, descended)
}

func (g *fastGen) list(depth int, descended bool) string {
	n := 1 + g.pick(3)
	s := make([]string, n)
	for i := range s {
		s[i] = g.sub(depth, descended)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// names writes a list of distinct property names.
func (g *fastGen) names() string {
	a, b := fastKeys[g.pick(len(fastKeys))], fastKeys[g.pick(len(fastKeys))]
	if a == b || g.pick(2) == 0 {
		return "[" + a + "]"
	}
	return "[" + a + "," + b + "]"
}

// constant writes a value for enum, const and default: no repeated keys,
// valid UTF-8.
func (g *fastGen) constant() string { return g.value(1, fastSchemaStrings, fastKeys) }

// instance writes a payload: valid JSON, no repeated key.
func (g *fastGen) instance() string { return g.value(3, fastStrings, fastInstanceKeys) }

func (g *fastGen) value(depth int, strs, keys []string) string {
	choice := g.pick(9)
	if depth <= 0 && choice >= 7 {
		choice = g.pick(7)
	}
	switch choice {
	case 0:
		return `null`
	case 1:
		return []string{`true`, `false`}[g.pick(2)]
	case 2, 3:
		return fastNumbers[g.pick(len(fastNumbers))]
	case 4, 5, 6:
		return strs[g.pick(len(strs))]
	case 7:
		items := make([]string, g.pick(4))
		for i := range items {
			items[i] = g.value(depth-1, strs, keys)
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	n := g.pick(4)
	members := make([]string, 0, n)
	seen := map[string]bool{}
	for range n {
		k := keys[g.pick(len(keys))]
		name := k
		if v, ok := fastKeyValue[k]; ok {
			name = v
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		members = append(members, k+":"+g.value(depth-1, strs, keys))
	}
	return "{" + strings.Join(members, ",") + "}"
}

// fastInstances is how many instances one input checks against its schema.
const fastInstances = 8

// FuzzFastPathAgreesWithValidator: over schemas written from the fast
// path's keywords and instances of the values they name, the fast path —
// on the decoded instance and on its tape — decides every pair, and
// decides it as the library does; Validate follows.
func FuzzFastPathAgreesWithValidator(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, schemaBytes, instanceBytes []byte) {
		text := newFastGen(schemaBytes).document()
		parsed, err := jsonFormat{}.Parse(text, nil, nil)
		if err != nil {
			return // a draft's meta-schema refuses what the grammar wrote (rare: TestFastGeneratorCompiles)
		}
		s := parsed.(*jsonSchema)
		if s.fast == nil {
			t.Fatalf("the fast path does not compile a schema of its own keywords: %s", text)
		}
		g := newFastGen(instanceBytes)
		for n := 0; n == 0 || (n < fastInstances && g.more()); n++ {
			fastCheckVerdicts(t, text, s, []byte(g.instance()))
		}
	})
}

// fastCheckVerdicts requires the decoded and the byte fast paths to
// decide payload under s, as the library does, and Validate to agree.
func fastCheckVerdicts(t *testing.T, text string, s *jsonSchema, payload []byte) {
	t.Helper()
	v, err := jsonDecode(payload)
	if err != nil {
		t.Fatalf("the generator wrote invalid JSON %q: %v", payload, err)
	}
	values, verr := jsonScanPayload(payload, s.limits)
	if verr != nil {
		t.Fatalf("the scan refuses generated payload %s: %v", payload, verr)
	}
	libErr := s.compiled.Validate(v)
	want := jsonInvalid
	if libErr == nil {
		want = jsonValid
	}
	budget := jsonStepBudget(s.limits, values)
	decoded := s.fast.validWithin(v, budget)
	tp := new(jsonTape)
	if !tp.read(payload, s.limits) {
		t.Fatalf("the tape refuses payload %s", payload)
	}
	onTape := s.fast.tcheck(tp, 0, 0, &jsonSteps{left: jsonStepBudget(s.limits, tp.values)})
	verdict := map[jsonVerdict]string{jsonValid: "valid", jsonInvalid: "invalid", jsonUnknown: "undecided", jsonOverBudget: "over budget"}
	if decoded != want || onTape != want {
		t.Fatalf("schema %s\npayload %s\nlibrary: %s (%v)\nfast path: %s decoded, %s on the tape",
			text, payload, verdict[want], libErr, verdict[decoded], verdict[onTape])
	}
	if got := s.Validate(payload); (got == nil) != (libErr == nil) {
		t.Fatalf("schema %s\npayload %s\nValidate: %v, library: %v", text, payload, got, libErr)
	}
}

// The grammar's schemas compile, and into the fast path: a generator whose
// schemas the compiler refused, or that wrote keywords the fast path
// leaves to the library, would compare nothing.
func TestFastGeneratorCompiles(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	const n = 500
	ok := 0
	for range n {
		b := make([]byte, 48)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		text := newFastGen(b).document()
		s, err := jsonFormat{}.Parse(text, nil, nil)
		if err != nil {
			continue
		}
		ok++
		if s.(*jsonSchema).fast == nil {
			t.Errorf("the fast path does not compile %s", text)
		}
	}
	if ok < n*9/10 {
		t.Fatalf("only %d of %d generated schemas compile", ok, n)
	}
}

// The committed seeds write every keyword of the grammar, in every draft,
// and boolean schemas, so that the 10 s CI run starts from all of them.
func TestFastPathCorpusCoversKeywords(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "fuzz", "FuzzFastPathAgreesWithValidator")
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, f := range files {
		args := fastReadCorpus(t, filepath.Join(dir, f.Name()))
		g := newFastGen(args[0])
		text := g.document()
		s, err := jsonFormat{}.Parse(text, nil, nil)
		if err != nil {
			t.Errorf("%s: %s does not compile: %v", f.Name(), text, err)
			continue
		}
		if s.(*jsonSchema).fast == nil {
			t.Errorf("%s: the fast path does not compile %s", f.Name(), text)
		}
		for k := range g.used {
			used[k] = true
		}
	}
	want := []string{"true", "false"}
	for _, d := range fastDrafts {
		want = append(want, d.name)
	}
	for _, k := range fastKeywords {
		want = append(want, k.name)
	}
	for _, w := range want {
		if !used[w] {
			t.Errorf("no seed in %s writes %s", dir, w)
		}
	}
}

// fastReadCorpus reads a corpus file of two []byte arguments.
func fastReadCorpus(t *testing.T, path string) [2][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a corpus file of two arguments", path)
	}
	var args [2][]byte
	for i, l := range lines[1:] {
		q, ok := strings.CutPrefix(l, "[]byte(")
		q, ok2 := strings.CutSuffix(q, ")")
		s, err := strconv.Unquote(q)
		if !ok || !ok2 || err != nil {
			t.Fatalf("%s: argument %d is not a []byte literal: %s", path, i+1, l)
		}
		args[i] = []byte(s)
	}
	return args
}

// Before 2019-09 a $ref's siblings are ignored, const included; from
// 2019-09 on they apply beside it. Every path reads it so.
func TestJSONRefSiblingsIgnored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		schema string
		valid  bool
	}{
		{`{"$schema":"http://json-schema.org/draft-06/schema#","definitions":{"d":{}},"$ref":"#/definitions/d","const":1}`, true},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"d":{}},"$ref":"#/definitions/d","const":1}`, true},
		{`{"definitions":{"d":{}},"properties":{"a":{"$ref":"#/definitions/d","const":1}}}`, true},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"d":{"const":1}},"$ref":"#/definitions/d","const":2}`, false},
		{`{"$schema":"https://json-schema.org/draft/2019-09/schema","$defs":{"d":{}},"$ref":"#/$defs/d","const":1}`, false},
		{`{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"d":{}},"$ref":"#/$defs/d","const":1}`, false},
	} {
		s := jsonTestParse(t, tc.schema)
		payload := []byte(`2`)
		if strings.Contains(tc.schema, `"properties"`) {
			payload = []byte(`{"a":2}`)
		}
		err := s.Validate(payload)
		if (err == nil) != tc.valid {
			t.Errorf("%s: Validate(%s) = %v, want valid %v", tc.schema, payload, err, tc.valid)
		}
		if err != nil {
			if verr, ok := errors.AsType[*schema.ValidationError](err); !ok || verr.Rule != "const" {
				t.Errorf("%s: Validate(%s) = %v, want a const error", tc.schema, payload, err)
			}
		}
		fastCheckVerdicts(t, tc.schema, s, payload)
	}
}
