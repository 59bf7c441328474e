package jsonfmt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

// jsonBytePathCases are the payloads where reading bytes instead of
// decoded values could go wrong. bytes is whether the byte path decides
// "valid" by itself; rule is Validate's error rule ("" for valid), the
// same whichever path decides.
var jsonBytePathCases = []struct {
	name, schema, payload string
	bytes                 bool
	rule                  string
}{
	{"object", `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`, `{"a":1}`, true, ""},
	{"surrounding space", `{"type":"object"}`, " \t\r\n{ \"a\" : [ 1 , 2 ] }\n ", true, ""},
	{"duplicate key", `{"type":"object"}`, `{"a":1,"a":1}`, false, "duplicateKey"},
	{"duplicate key escaped", `{"type":"object"}`, `{"a":1,"\u0061":2}`, false, "duplicateKey"},
	{"duplicate key nested", `{}`, `[{"b":{"c":1,"c":2}}]`, false, "duplicateKey"},
	{"keys differing in case", `{"required":["a","A"]}`, `{"a":1,"A":2}`, true, ""},
	{"many keys", `{"type":"object","maxProperties":40}`, `{` + jsonTestKeys(40, "") + `}`, true, ""},
	{"many keys, one twice", `{"type":"object"}`, `{` + jsonTestKeys(40, `,"k3":0`) + `}`, false, "duplicateKey"},
	{"escaped key looked up", `{"properties":{"é":{"type":"string"}}}`, `{"\u00e9":1}`, false, "type"},
	{"escaped key required", `{"required":["é"]}`, `{"\u00e9":1}`, true, ""},
	{"1.0 is an integer", `{"type":"integer"}`, `1.0`, true, ""},
	{"1e2 is an integer", `{"type":"integer"}`, `1e2`, true, ""},
	{"1.5 is not", `{"type":"integer"}`, `1.5`, false, "type"},
	{"huge integer", `{"type":"integer","minimum":0}`, `123456789012345678901234567890`, true, ""},
	{"huge integer against a bound", `{"maximum":123456789012345678901234567889}`, `123456789012345678901234567890`, false, "maximum"},
	{"exponent at the limit", `{"type":"number"}`, `1e400`, true, ""},
	{"exponent past the limit", `{"type":"number"}`, `1e401`, false, "MaxNumberExponent"},
	{"number past its length", `{"type":"number"}`, strings.Repeat("9", 101), false, "MaxNumberLength"},
	{"const 1 vs 1.0", `{"const":1}`, `1.0`, true, ""},
	{"enum of objects", `{"enum":[{"a":[1,"x"]}]}`, `{"a":[1.0,"\u0078"]}`, true, ""},
	{"unique 1 and 1.0", `{"uniqueItems":true}`, `[1,1.0]`, false, "uniqueItems"},
	{"unique objects in other order", `{"uniqueItems":true}`, `[{"a":1,"b":2},{"b":2,"a":1}]`, false, "uniqueItems"},
	{"length in code points", `{"maxLength":1}`, `"é"`, true, ""},
	{"length of an escape", `{"maxLength":1,"minLength":1}`, `"\u00e9"`, true, ""},
	{"length of a surrogate pair", `{"maxLength":1}`, `"\ud83d\ude00"`, true, ""},
	{"length of an emoji", `{"maxLength":1}`, `"😀"`, true, ""},
	{"too long in code points", `{"maxLength":2}`, `"日本語"`, false, "maxLength"},
	{"escaped NUL", `{"const":"\u0000"}`, `"\u0000"`, true, ""},
	{"raw NUL", `{}`, "\"\x00\"", false, "json"},
	{"lone surrogate", `{"const":"\ufffd"}`, `"\ud800"`, true, ""},
	{"invalid UTF-8", `{"maxLength":1,"pattern":"^\ufffd$"}`, "\"\xff\"", true, ""},
	{"pattern on an escaped string", `{"pattern":"^a\"b$"}`, `"a\"b"`, true, ""},
	{"depth at the limit", `{"type":"array"}`, strings.Repeat("[", 64) + strings.Repeat("]", 64), true, ""},
	{"depth past the limit", `{"type":"array"}`, strings.Repeat("[", 65) + strings.Repeat("]", 65), false, ""},
	{"trailing garbage", `{}`, `{} x`, false, "json"},
	{"two documents", `{}`, `{}{}`, false, "json"},
	{"byte order mark", `{}`, "\xef\xbb\xbf{}", false, "json"},
	{"empty", `{}`, ``, false, "json"},
	{"only space", `{}`, "  \n", false, "json"},
	{"NaN", `{}`, `NaN`, false, "json"},
	{"Infinity", `{}`, `-Infinity`, false, "json"},
	{"plus sign", `{}`, `+1`, false, "json"},
	{"leading zero", `{}`, `01`, false, "json"},
	{"bare fraction", `{}`, `.5`, false, "json"},
	{"dangling point", `{}`, `1.`, false, "json"},
	{"dangling exponent", `{}`, `1e`, false, "json"},
	{"short literal", `{}`, `tru`, false, "json"},
	{"long literal", `{}`, `nulll`, false, "json"},
	{"single quotes", `{}`, `{'a':1}`, false, "json"},
	{"trailing comma", `{}`, `[1,]`, false, "json"},
	{"bad escape", `{}`, `"\x"`, false, "json"},
	{"short unicode escape", `{}`, `"\u12"`, false, "json"},
	{"unterminated", `{}`, `{"a":"b`, false, "json"},
	{"missing colon", `{}`, `{"a" 1}`, false, "json"},
	{"invalid under the schema", `{"type":"object","required":["a"]}`, `{"b":1}`, false, "required"},
	{"valid only by oneOf", `{"oneOf":[{"type":"integer"},{"minimum":5}]}`, `1`, true, ""},
	{"unevaluated: library only", `{"$schema":"https://json-schema.org/draft/2020-12/schema","unevaluatedProperties":false}`, `{}`, false, ""},
}

// jsonTestKeys writes n members "k0":0... and extra.
func jsonTestKeys(n int, extra string) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + string(rune('0'+i/10)) + string(rune('0'+i%10)) + `":0`)
	}
	return strings.Replace(b.String(), `"k03"`, `"k3"`, 1) + extra
}

func TestJSONBytePath(t *testing.T) {
	t.Parallel()
	for _, tc := range jsonBytePathCases {
		t.Run(tc.name, func(t *testing.T) {
			s := jsonTestParse(t, tc.schema)
			if got := s.validBytes([]byte(tc.payload)); got != tc.bytes {
				t.Errorf("byte path valid = %v, want %v", got, tc.bytes)
			}
			err := s.Validate([]byte(tc.payload))
			var verr *schema.ValidationError
			switch {
			case tc.rule == "" && err != nil:
				t.Fatalf("Validate = %v, want valid", err)
			case tc.rule != "" && (!errors.As(err, &verr) || verr.Rule != tc.rule):
				t.Fatalf("Validate = %v, want a %s error", err, tc.rule)
			}
			// Messages do not depend on the path.
			if d := s.validateDecoded([]byte(tc.payload)); (d == nil) != (err == nil) || (d != nil && d.Error() != err.Error()) {
				t.Fatalf("Validate = %v, the decoding path = %v", err, d)
			}
			jsonCheckAgreement(t, tc.name, s, []byte(tc.payload))
		})
	}
}

// TestJSONBytePathUsed guards the performance claim: the shipped request
// schema's valid payloads are accepted without decoding.
func TestJSONBytePathUsed(t *testing.T) {
	s := jsonTestParse(t, jsonTestRequestSchema)
	if !s.validBytes(jsonTestRequest) {
		t.Fatal("the byte path does not accept the valid request")
	}
	// One tape, as the pool hands out (the race detector makes the pool
	// drop items at random, so it is left out of the count).
	tp := new(jsonTape)
	allocs := testing.AllocsPerRun(100, func() {
		if !tp.read(jsonTestRequest, s.limits) {
			t.Fatal("tape refused the request")
		}
		st := jsonSteps{left: jsonStepBudget(s.limits, tp.values)}
		if s.fast.tcheck(tp, 0, 0, &st) != jsonValid {
			t.Fatal("byte path refused the request")
		}
	})
	if allocs > 0 {
		t.Fatalf("reading and checking a valid request allocates %.0f times, want 0", allocs)
	}
}

// A payload as large as the broker takes is read in one pass and its tape
// is not kept for reuse.
func TestJSONBytePathLarge(t *testing.T) {
	s := jsonTestParse(t, `{"type":"array","items":{"type":"integer"}}`)
	payload := "[" + strings.Repeat("1,", 200_000) + "1]"
	if !s.validBytes([]byte(payload)) {
		t.Fatal("the byte path does not accept a large valid array")
	}
	tp := jsonGetTape()
	defer jsonPutTape(tp)
	if cap(tp.toks) > jsonTapeMaxPooled {
		t.Fatalf("a tape of %d tokens was kept for reuse (bound %d)", cap(tp.toks), jsonTapeMaxPooled)
	}
}

// Name lookups and uniqueItems comparisons walk the tape; past their
// bounds the byte path declines (the decoding path uses maps and hashes)
// rather than doing quadratic work.
func TestJSONBytePathBounds(t *testing.T) {
	t.Parallel()
	names := make([]string, 200)
	for i := range names {
		names[i] = fmt.Sprintf("%q", fmt.Sprintf("r%d", i))
	}
	required := jsonTestParse(t, `{"required":[`+strings.Join(names, ",")+`]}`)
	members := make([]string, 200)
	for i := range members {
		members[i] = fmt.Sprintf(`"r%d":%d`, i, i)
	}
	wide := []byte(`{` + strings.Join(members, ",") + `}`)
	if required.validBytes(wide) {
		t.Error("the byte path looked up 200 names among 200 members")
	}
	if err := required.Validate(wide); err != nil {
		t.Errorf("Validate = %v, want valid", err)
	}
	small := []byte(`{` + strings.Join(members[:20], ",") + `}`)
	if few := jsonTestParse(t, `{"required":["r1","r19"]}`); !few.validBytes(small) {
		t.Error("the byte path declined 2 names among 20 members")
	}

	unique := jsonTestParse(t, `{"uniqueItems":true}`)
	items := make([]string, 60)
	for i := range items {
		items[i] = fmt.Sprintf(`{"a":%d,"b":[1,2,3]}`, i)
	}
	big := []byte(`[` + strings.Join(items, ",") + `]`)
	if unique.validBytes(big) {
		t.Error("the byte path compared every pair of 60 objects (420 tokens)")
	}
	if err := unique.Validate(big); err != nil {
		t.Errorf("Validate = %v, want valid", err)
	}
	if !unique.validBytes([]byte(`[` + strings.Join(items[:10], ",") + `]`)) {
		t.Error("the byte path declined uniqueItems on 10 small objects")
	}
}

// BenchmarkJSONValidatePaths compares the byte path (Validate on a valid
// payload) with the decoding path it replaces, on the ~300-byte request
// and on the same request padded to 1 KiB.
func BenchmarkJSONValidatePaths(b *testing.B) {
	s := jsonTestParse(b, jsonTestRequestSchema)
	pad := strings.Repeat("x", 1024-len(jsonTestRequest))
	kib := []byte(strings.Replace(string(jsonTestRequest), "three bullet points", "three bullet points"+pad, 1))
	for _, p := range []struct {
		name    string
		payload []byte
	}{{"300B", jsonTestRequest}, {"1KiB", kib}} {
		for _, path := range []struct {
			name string
			run  func([]byte) error
		}{{"bytes", s.Validate}, {"decoded", s.validateDecoded}} {
			b.Run(p.name+"/"+path.name, func(b *testing.B) {
				b.SetBytes(int64(len(p.payload)))
				b.ReportAllocs()
				for b.Loop() {
					if err := path.run(p.payload); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// The 8-byte skip of the tokenizer misses no byte a string must stop at.
func TestJSONSpecial8(t *testing.T) {
	t.Parallel()
	for b := range 256 {
		want := b == '"' || b == '\\' || b < 0x20 || b >= 0x80
		for pos := range 8 {
			for _, fill := range []byte{'a', ' ', '~', '!', '#', '[', ']'} {
				w := []byte(strings.Repeat(string(fill), 8))
				w[pos] = byte(b)
				if got := jsonSpecial8(binary.LittleEndian.Uint64(w)); want && !got {
					t.Fatalf("byte %#x at %d among %q: not flagged", b, pos, fill)
				}
			}
		}
	}
	if jsonSpecial8(binary.LittleEndian.Uint64([]byte("plain te"))) {
		t.Error("8 plain ASCII bytes flagged")
	}
}

// Validate is called from every ingress goroutine at once: the pooled
// tapes never mix payloads.
func TestJSONBytePathConcurrent(t *testing.T) {
	t.Parallel()
	s := jsonTestParse(t, jsonTestRequestSchema)
	bad := []byte(`{"model":"m","messages":[{"role":"robot","content":"x"}]}`)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				if (g+i)%2 == 0 {
					if err := s.Validate(jsonTestRequest); err != nil {
						errs <- fmt.Errorf("valid request refused: %w", err)
						return
					}
				} else if err := s.Validate(bad); err == nil || !strings.Contains(err.Error(), "robot") {
					errs <- fmt.Errorf("bad request: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
