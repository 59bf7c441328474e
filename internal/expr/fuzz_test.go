package expr

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

var fuzzMessage = Message{
	Subject: "ai.inference.llm",
	Header:  fullHeader,
	Data:    []byte(chat),
}

// FuzzCompile feeds arbitrary source to the compiler: it must return a
// program or a *CompileError, never panic, and a program must evaluate
// without panicking.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`payload.confidence > 0.85 && model.startsWith("llama")`,
		`payload.tags.exists(t, t == "urgent")`,
		`has(payload.user) && payload.messages[0].role == "user"`,
		`headers[?"X"].orValue("") == ""`,
		`deadline - now < duration("5s")`,
		`tenant + "/" + session`,
		`[1, 2, 3].map(x, x * 2)`,
		`model ==`, `modle == "x"`, `((((`, `"\u00`, `payload.?a.?b`, "a\n&&\nb",
	} {
		f.Add(s)
	}
	e, err := NewEnv()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		for _, compile := range []func(string) (*Program, error){e.Compile, e.CompileKey} {
			p, err := compile(src)
			if err != nil {
				var ce *CompileError
				if !isCompileError(err, &ce) {
					t.Fatalf("Compile(%q) returned %T %v, not a *CompileError", src, err, err)
				}
				continue
			}
			if p.kind == kindFilter {
				p.Match(fuzzMessage)
			} else {
				p.Key(fuzzMessage)
			}
			p.Eval(fuzzMessage)
		}
	})
}

func isCompileError(err error, ce **CompileError) bool {
	c, ok := err.(*CompileError)
	*ce = c
	return ok
}

// fuzzPrograms exercise every way an expression reaches into the payload
// and the headers.
var fuzzPrograms = []string{
	`payload.confidence > 0.85 && model.startsWith("llama")`,
	`has(payload.a) && has(payload.a.b)`,
	`payload.a.b[0].c == "x"`,
	`payload[0] == payload[1]`,
	`payload.exists(k, k == "a")`,
	`payload.a.exists(x, x == 1)`,
	`payload.a.all(k, payload.a[k] != null)`,
	`size(payload) > 0 && size(payload.a) >= 0`,
	`"a" in payload && 1 in payload.a`,
	`payload == {"a": [1, "x", null, true, {"b": 2.5}]}`,
	`payload.a == payload.a && payload != null`,
	`payload.a + [1] == [1]`,
	`string(payload.a) == "x"`,
	`type(payload.a) == list`,
	`payload.?a.?b.orValue(0) == 0`,
	`headers.exists(k, headers[k] == "x") && size(headers) > 0`,
	`headers[?"a"].orValue("") == subject`,
	`model == "" && tenant == "" && priority < 5 && prompt_tokens < 0 && schema_id < 0 && deadline > now`,
	`headers == {"a": "b"}`,
	// Functions that build values, each charged to the memory budget.
	`payload.a.replace(payload.b, payload.a).size() >= 0`,
	`[payload.a, payload.b, subject].join(payload.a).size() >= 0`,
	`(payload.a + payload.a + payload.b).split(payload.b).size() >= 0`,
	`"%s %s".format([payload.a, payload.b]).size() >= 0`,
	`strings.quote(payload.a).upperAscii().reverse().size() >= 0`,
	`payload.c.map(x, payload.a + string(x)).size() >= 0`,
	`(payload.c + payload.c).size() >= 0`,
	`subject.matches(payload.a)`,
}

// FuzzEval evaluates fixed programs over arbitrary payloads and headers:
// never a panic, and never an internal error (CEL turns a panic in a value's
// method into one).
func FuzzEval(f *testing.F) {
	f.Add([]byte(chat), "AI-Model", "llama3", "ai.x")
	f.Add([]byte(`{"a": {"b": [{"c": "x"}]}}`), "AI-Priority", "high", "")
	f.Add([]byte(`{"a": [1, 2, 3], "confidence": 0.9}`), "ai-tenant", "t", "s")
	f.Add([]byte(`[1, 1, {"a": "\"}"}]`), "X-Lora-Adapter-ID", "l", "")
	f.Add([]byte(`{"a": "\u00e9\\\"", "a": [}`), "AI-Deadline", "2026-01-02T15:04:05Z", "")
	f.Add([]byte(`{"a":{"b":1,"c":[true,false,null]}}`), "AI-Prompt-Tokens", "12", "")
	f.Add([]byte("\xff{"), "", "", "")
	f.Add([]byte(`{"a": "`+strings.Repeat("a", 4096)+`", "b": "", "c": [1, 2, 3]}`), "", "", "a")
	f.Add([]byte(`{"a": "(a{1000}){1000}", "b": "a", "c": [`+strings.Repeat("0,", 1000)+`0]}`), "", "", "")
	e, err := NewEnv()
	if err != nil {
		f.Fatal(err)
	}
	progs := make([]*Program, len(fuzzPrograms))
	for i, src := range fuzzPrograms {
		p, err := e.Compile(src)
		if err != nil {
			f.Fatalf("%s: %v", src, err)
		}
		progs[i] = p
	}
	f.Fuzz(func(t *testing.T, data []byte, name, value, subject string) {
		m := Message{Subject: subject, Header: map[string][]string{name: {value}, "a": {value}}, Data: data}
		for i, p := range progs {
			var err error
			n := allocated(func() { _, err = p.Match(m) })
			if err != nil && strings.Contains(err.Error(), "internal error") {
				t.Fatalf("%s on %q: %v", fuzzPrograms[i], data, err)
			}
			// The budget, MaxEvalBytes + 2 × the payload, plus what CEL
			// allocates besides (transient copies, at most a few times).
			if bound := uint64(8 * (DefaultMaxEvalBytes + 2*len(data))); n > bound {
				t.Fatalf("%s on %d bytes allocated %d bytes, over %d", fuzzPrograms[i], len(data), n, bound)
			}
		}
	})
}

// FuzzPayload walks the lazy payload view with every method, outside CEL
// (so a panic is not recovered), and checks it against encoding/json on
// valid input.
func FuzzPayload(f *testing.F) {
	for _, s := range []string{
		chat, `[]`, `{}`, `[1,[2,[3]]]`, `{"a":"\\"}"}`, `"x"`, `-1.5e3`, `{"a":1,}`, `[,]`, `{"a"}`,
		`{"a":"b\u0000"}`, `{"\ud800":1}`, `  {"a" : [ 1 , 2 ] }  `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := json.Valid(data) && utf8.Valid(data)
		v, isJSON, _ := payloadValue(string(data), nil)
		got := walk(t, v, valid, 0)
		if !valid {
			// The view is lenient on invalid input; only valid input has a
			// reference answer.
			return
		}
		if !isJSON {
			t.Fatalf("valid JSON %q read as not JSON", data)
		}
		var want any
		if err := json.Unmarshal(data, &want); err != nil {
			return // valid syntax that Go cannot hold, such as 1e400
		}
		if hasDuplicateKeys(got) {
			return // encoding/json keeps the last, the view the first
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("payload %q\n view: %#v\n json: %#v", data, got, want)
		}
	})
}

type dupMarker struct{}

// walk converts a payload value to Go, calling every method of the lazy
// types on the way.
// On valid JSON (strict) every element must read without error.
func walk(t *testing.T, v ref.Val, strict bool, depth int) any {
	if depth > 64 {
		return nil
	}
	switch x := v.(type) {
	case *jsonObject:
		n := int(x.Size().(types.Int))
		out := map[string]any{}
		it := x.Iterator()
		i := 0
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				t.Fatalf("object key %v is %T", k, k)
			}
			val, found := x.Find(k)
			if !found {
				t.Fatalf("key %q listed but not found", ks)
			}
			if x.Contains(k) != types.True {
				t.Fatalf("key %q listed but not contained", ks)
			}
			if _, dup := out[string(ks)]; dup {
				out[""] = dupMarker{}
			} else {
				out[string(ks)] = walk(t, val, strict, depth+1)
			}
			i++
		}
		if i != n {
			t.Fatalf("Size %d, iterated %d", n, i)
		}
		folded := 0
		x.Fold(folder(func(k, v any) bool { folded++; return true }))
		if folded != n {
			t.Fatalf("Size %d, folded %d", n, folded)
		}
		x.Get(types.Int(1))
		x.Get(types.String("\x00missing"))
		x.Equal(x)
		x.Equal(types.NullValue)
		x.ConvertToNative(reflect.TypeOf(map[string]any{}))
		x.ConvertToType(types.TypeType)
		return out
	case *jsonList:
		n := int(x.Size().(types.Int))
		out := []any{}
		for i := range n {
			el := x.Get(types.Int(i))
			if strict && types.IsError(el) {
				t.Fatalf("element %d of %d: %v", i, n, el)
			}
			out = append(out, walk(t, el, strict, depth+1))
		}
		if !types.IsError(x.Get(types.Int(n))) || !types.IsError(x.Get(types.Int(-1))) {
			t.Fatal("out of range index did not fail")
		}
		it := x.Iterator()
		i := 0
		for it.HasNext() == types.True {
			it.Next()
			i++
		}
		if i != n {
			t.Fatalf("Size %d, iterated %d", n, i)
		}
		x.Contains(types.String("x"))
		x.Equal(x)
		x.Add(types.NewDynamicList(types.DefaultTypeAdapter, []any{1}))
		x.ConvertToNative(reflect.TypeOf([]any{}))
		return out
	case types.String:
		return string(x)
	case types.Double:
		return float64(x)
	case types.Bool:
		return bool(x)
	case types.Null:
		return nil
	case *types.Err:
		if strict {
			t.Fatalf("error in valid JSON: %v", x)
		}
		return x
	}
	t.Fatalf("unexpected payload value %T", v)
	return nil
}

type folder func(k, v any) bool

func (f folder) FoldEntry(k, v any) bool { return f(k, v) }

var _ traits.Folder = folder(nil)

func hasDuplicateKeys(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x[""].(dupMarker); ok {
			return true
		}
		for _, e := range x {
			if hasDuplicateKeys(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasDuplicateKeys(e) {
				return true
			}
		}
	}
	return false
}
