package jsonfmt

import (
	"fmt"
	"strings"
	"testing"
)

// jsonGen turns fuzz bytes into choices: a schema from a small grammar of
// the keywords the byte path implements, and a payload built from values
// that sit on their edges (1 vs 1.0, escapes, code points, empty
// containers). Out of bytes, every choice is 0.
type jsonGen struct {
	b []byte
	i int
}

func (g *jsonGen) pick(n int) int {
	if g.i >= len(g.b) {
		return 0
	}
	c := int(g.b[g.i])
	g.i++
	return c % n
}

var (
	jsonGenKeys    = []string{`"a"`, `"b"`, `"c"`, `"\u0061"`, `"é"`, `"x-1"`}
	jsonGenNumbers = []string{`0`, `-0`, `1`, `1.0`, `1.5`, `-3`, `1e2`, `2.5E-1`, `10`, `0.1`, `100.00000000000001`,
		`12345678901234567890`, `1e20`, `-1e-7`, `3.0000000000000000001`}
	jsonGenStrings = []string{`""`, `"a"`, `"ab"`, `"abc"`, `"é"`, `"\u00e9"`, `"日本語"`, `"a\"b"`, `"\ud800"`,
		`"\u0000"`, `"x-1"`, `"a@b.example"`, "\"\xff\"", `"\n"`, `"aaaa"`}
	jsonGenPatterns = []string{`^a`, `b$`, `^[a-c]*$`, `é`, `^x-`, `\\d`}
	jsonGenTypes    = []string{`"null"`, `"boolean"`, `"number"`, `"integer"`, `"string"`, `"array"`, `"object"`,
		`["integer","null"]`, `["string","array"]`}
)

// value writes a payload value, nested at most depth more levels. Its
// objects may repeat a key; constant writes a value whose objects do not,
// for a schema.
func (g *jsonGen) value(depth int) string { return g.valueKeys(depth, false) }

func (g *jsonGen) constant() string { return g.valueKeys(1, true) }

func (g *jsonGen) valueKeys(depth int, distinct bool) string {
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
		return jsonGenNumbers[g.pick(len(jsonGenNumbers))]
	case 4, 5, 6:
		return jsonGenStrings[g.pick(len(jsonGenStrings))]
	case 7:
		n := g.pick(4)
		items := make([]string, n)
		for i := range items {
			items[i] = g.valueKeys(depth-1, distinct)
		}
		return "[" + strings.Join(items, ",") + "]"
	}
	n := g.pick(4)
	members := make([]string, 0, n)
	seen := map[string]bool{}
	for range n {
		k := jsonGenKeys[g.pick(len(jsonGenKeys))]
		if distinct && (seen[k] || (k == `"\u0061"` && seen[`"a"`]) || (k == `"a"` && seen[`"\u0061"`])) {
			continue
		}
		seen[k] = true
		members = append(members, k+":"+g.valueKeys(depth-1, distinct))
	}
	return "{" + strings.Join(members, ",") + "}"
}

// schema writes a schema of at most depth levels of subschemas.
func (g *jsonGen) schema(depth int) string {
	switch g.pick(12) {
	case 0:
		return []string{`true`, `false`}[g.pick(2)]
	case 1:
		return `{"$ref":"#/$defs/d"}`
	}
	var kw []string
	seen := map[string]bool{}
	for range 1 + g.pick(3) {
		k := g.keyword(depth)
		name := k[:strings.IndexByte(k[1:], '"')+2]
		if !seen[name] {
			seen[name] = true
			kw = append(kw, k)
		}
	}
	return "{" + strings.Join(kw, ",") + "}"
}

func (g *jsonGen) keyword(depth int) string {
	sub := func() string {
		if depth <= 0 {
			return []string{`true`, `false`, `{"type":"string"}`, `{"minimum":1}`}[g.pick(4)]
		}
		return g.schema(depth - 1)
	}
	list := func() string {
		n := 1 + g.pick(3)
		s := make([]string, n)
		for i := range s {
			s[i] = sub()
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	num := func() string { return jsonGenNumbers[g.pick(len(jsonGenNumbers))] }
	small := func() string { return fmt.Sprint(g.pick(4)) }
	key := func() string { return jsonGenKeys[g.pick(len(jsonGenKeys))] }
	switch g.pick(24) {
	case 0:
		return `"type":` + jsonGenTypes[g.pick(len(jsonGenTypes))]
	case 1:
		return `"properties":{` + key() + ":" + sub() + `,"z":` + sub() + `}`
	case 2:
		return `"required":[` + key() + `]`
	case 3:
		return `"additionalProperties":` + sub()
	case 4:
		return `"items":` + sub()
	case 5:
		return `"prefixItems":` + list()
	case 6:
		return `"enum":[` + g.constant() + "," + g.constant() + `]`
	case 7:
		return `"const":` + g.constant()
	case 8:
		return `"minLength":` + small()
	case 9:
		return `"maxLength":` + small()
	case 10:
		return []string{`"minimum":`, `"maximum":`, `"exclusiveMinimum":`, `"exclusiveMaximum":`}[g.pick(4)] + num()
	case 11:
		return `"multipleOf":` + []string{`2`, `0.5`, `0.1`, `3`}[g.pick(4)]
	case 12:
		return `"pattern":"` + jsonGenPatterns[g.pick(len(jsonGenPatterns))] + `"`
	case 13:
		return []string{`"minItems":`, `"maxItems":`, `"minProperties":`, `"maxProperties":`}[g.pick(4)] + small()
	case 14:
		return `"uniqueItems":true`
	case 15:
		return `"allOf":` + list()
	case 16:
		return `"anyOf":` + list()
	case 17:
		return `"oneOf":` + list()
	case 18:
		return `"not":` + sub()
	case 19:
		return `"if":` + sub() + `,"then":` + sub() + `,"else":` + sub()
	case 20:
		return `"patternProperties":{"` + jsonGenPatterns[g.pick(len(jsonGenPatterns))] + `":` + sub() + `}`
	case 21:
		return `"contains":` + sub()
	case 22:
		return `"propertyNames":` + sub()
	}
	return `"dependentRequired":{` + key() + `:[` + key() + `]}`
}

// jsonGenDocument is a 2020-12 schema with one local definition.
func (g *jsonGen) document() string {
	root := g.schema(2)
	def := g.schema(1)
	head := `{"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"d":` + def + `}`
	if root == "true" || root == "false" {
		return head + `,"allOf":[` + root + `]}`
	}
	if root == "{}" {
		return head + "}"
	}
	return head + "," + root[1:]
}

// FuzzJSONBytePathGenerated: over schemas from a small grammar and
// payloads built from edge values, the byte path never accepts what the
// library rejects, and Validate agrees with the library. Any disagreement
// is a bug in the fast paths.
func FuzzJSONBytePathGenerated(f *testing.F) {
	for _, seed := range []string{"", "\x00", "\x01\x02\x03", "\x05\x07\x01\x02\x03\x04", "\x0f\x10\x11\x12\x13\x14\x15\x16",
		"\x02\x00\x01\x07\x03\x08\x02\x07\x08", "\x17\x16\x15\x14\x13\x12\x11\x10\x0f\x0e\x0d\x0c"} {
		f.Add([]byte(seed), []byte(seed))
	}
	f.Fuzz(func(t *testing.T, schemaBytes, payloadBytes []byte) {
		g := &jsonGen{b: schemaBytes}
		text := g.document()
		sc, err := jsonFormat{}.Parse(text, nil, nil)
		if err != nil {
			return // the grammar can write schemas the compiler refuses
		}
		s := sc.(*jsonSchema)
		p := &jsonGen{b: payloadBytes}
		payload := p.value(3)
		jsonCheckAgreement(t, text, s, []byte(payload))
		// The same payload with surrounding space, and cut short.
		jsonCheckAgreement(t, text, s, []byte(" \n"+payload+"\t"))
		jsonCheckAgreement(t, text, s, []byte(payload[:len(payload)/2]))
	})
}

// FuzzJSONBytePath: any payload bytes, against the schemas of
// jsonTestAgreement: the byte path accepts only what the decoding path
// and the library accept.
func FuzzJSONBytePath(f *testing.F) {
	schemas := make([]*jsonSchema, len(jsonTestAgreement))
	for i, tc := range jsonTestAgreement {
		schemas[i] = jsonTestParse(f, tc.schema)
		for _, p := range tc.payloads {
			f.Add(uint8(i), []byte(p))
		}
	}
	for _, tc := range jsonBytePathCases {
		f.Add(uint8(0), []byte(tc.payload))
	}
	f.Fuzz(func(t *testing.T, which uint8, payload []byte) {
		i := int(which) % len(schemas)
		jsonCheckAgreement(t, fmt.Sprintf("schema %d", i), schemas[i], payload)
	})
}

// The grammar's output compiles often enough to be worth fuzzing: a
// generator that only wrote refused schemas would test nothing.
func TestJSONGeneratorCompiles(t *testing.T) {
	ok := 0
	for i := range 256 {
		g := &jsonGen{b: []byte{byte(i), byte(i * 7), byte(i * 13), byte(i * 31), byte(i * 5), byte(i * 3)}}
		if _, err := (jsonFormat{}).Parse(g.document(), nil, nil); err == nil {
			ok++
		}
	}
	if ok < 200 {
		t.Fatalf("only %d of 256 generated schemas compile", ok)
	}
}
