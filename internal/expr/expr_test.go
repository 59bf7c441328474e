package expr

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"cel.dev/cel-go/common/types"
)

// chat is the payload most cases read.
const chat = `{
  "model": "llama3-8b",
  "confidence": 0.91,
  "count": 3,
  "flag": true,
  "off": false,
  "nothing": null,
  "tags": ["finance", "urgent", "board"],
  "empty": [],
  "user": {"name": "ann", "age": 30, "address": {"city": "Oslo"}},
  "messages": [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi there", "parts": [{"n": 1}, {"n": 2}]}
  ],
  "matrix": [[1, 2], [3, 4]],
  "esc": "a\"b\\c\nd",
  "uni": "caf\u00e9 \ud83d\ude00",
  "we\"ird": 1,
  "a.b": 2,
  "": "blank key",
  "big": 1e400,
  "neg": -2.5e-3,
  "dup": 1, "dup": 2
}`

var fullHeader = map[string][]string{
	"AI-Model":         {"llama3-8b-instruct"},
	"AI-Model-Version": {"2024-07"},
	"AI-Adapter":       {"sql-lora"},
	"AI-Priority":      {"1"},
	"AI-Tenant":        {"acme"},
	"AI-Intent":        {"reasoning"},
	"AI-Session":       {"s-42"},
	"AI-Prompt-Tokens": {"1200"},
	"AI-Schema-Id":     {"7"},
	"AI-Deadline":      {"2026-01-02T15:04:05.5Z"},
	"X-Custom":         {"one", "two"},
	"Empty-Values":     {},
}

type matchCase struct {
	name    string
	src     string
	subject string
	header  map[string][]string
	data    string
	want    bool
	wantErr string // substring of the error; "" means no error
}

func runMatchCases(t *testing.T, cases []matchCase) {
	t.Helper()
	e := testEnv(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := e.Compile(c.src)
			if err != nil {
				t.Fatalf("Compile(%q): %v", c.src, err)
			}
			got, err := p.Match(Message{Subject: c.subject, Header: c.header, Data: []byte(c.data)})
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Match(%q) = %v, %v; want error containing %q", c.src, got, err, c.wantErr)
				}
				if !errors.Is(err, ErrEval) {
					t.Errorf("error %v does not match ErrEval", err)
				}
				if got {
					t.Errorf("Match returned true with an error")
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Match(%q) = %v, %v; want %v", c.src, got, err, c.want)
			}
		})
	}
}

func TestVariables(t *testing.T) {
	h := fullHeader
	runMatchCases(t, []matchCase{
		{name: "subject", src: `subject == "ai.inference.llm"`, subject: "ai.inference.llm", want: true},
		{name: "subject/startsWith", src: `subject.startsWith("ai.inference.")`, subject: "ai.events.x", want: false},
		{name: "subject/empty", src: `subject == ""`, want: true},

		{name: "headers/index", src: `headers["AI-Tenant"] == "acme"`, header: h, want: true},
		{name: "headers/first value", src: `headers["X-Custom"] == "one"`, header: h, want: true},
		{name: "headers/any case", src: `headers["x-custom"] == "one"`, header: h, want: true},
		{name: "headers/in", src: `"X-Custom" in headers && !("Nope" in headers)`, header: h, want: true},
		{name: "headers/no values is absent", src: `"Empty-Values" in headers`, header: h, want: false},
		{name: "headers/has", src: `has(headers.nope)`, header: h, want: false},
		{name: "headers/optional", src: `headers[?"Nope"].orValue("none") == "none"`, header: h, want: true},
		{name: "headers/size", src: `size(headers) == 11`, header: h, want: true},
		{name: "headers/exists", src: `headers.exists(k, k.startsWith("X-") && headers[k] == "one")`, header: h, want: true},
		{name: "headers/missing", src: `headers["Nope"] == "x"`, header: h, wantErr: "no such key: Nope"},
		{name: "headers/nil map", src: `size(headers) == 0 && !("A" in headers)`, want: true},

		{name: "model", src: `model == "llama3-8b-instruct"`, header: h, want: true},
		{name: "model_version", src: `model_version == "2024-07"`, header: h, want: true},
		{name: "adapter", src: `adapter == "sql-lora"`, header: h, want: true},
		{name: "tenant", src: `tenant == "acme"`, header: h, want: true},
		{name: "intent", src: `intent == "reasoning"`, header: h, want: true},
		{name: "session", src: `session == "s-42"`, header: h, want: true},
		{name: "priority", src: `priority == 1`, header: h, want: true},
		{name: "prompt_tokens", src: `prompt_tokens == 1200`, header: h, want: true},
		{name: "schema_id", src: `schema_id == 7`, header: h, want: true},
		{name: "deadline", src: `deadline == timestamp("2026-01-02T15:04:05.5Z")`, header: h, want: true},
		{name: "deadline/arithmetic", src: `deadline - duration("5s") > timestamp("2026-01-02T15:04:00Z")`, header: h, want: true},
		{name: "deadline/past", src: `deadline < now`, header: map[string][]string{"AI-Deadline": {"2001-01-01T00:00:00Z"}}, want: true},
		{name: "now", src: `now > timestamp("2020-01-01T00:00:00Z") && now == now`, want: true},

		{name: "absent/strings", src: `model == "" && model_version == "" && adapter == "" && tenant == "" && intent == "" && session == ""`, want: true},
		{name: "absent/priority", src: `priority == 4`, want: true},
		{name: "absent/prompt_tokens", src: `prompt_tokens == -1`, want: true},
		{name: "absent/schema_id", src: `schema_id == -1`, want: true},
		{name: "absent/deadline", src: `deadline == timestamp("9999-12-31T23:59:59.999999999Z") && deadline > now`, want: true},

		{name: "priority/name", src: `priority == 0`, header: map[string][]string{"AI-Priority": {"critical"}}, want: true},
		{name: "priority/name any case", src: `priority == 8`, header: map[string][]string{"AI-Priority": {"BULK"}}, want: true},
		{name: "priority/invalid", src: `priority == 4`, header: map[string][]string{"AI-Priority": {"urgent"}}, want: true},
		{name: "prompt_tokens/invalid", src: `prompt_tokens == -1`, header: map[string][]string{"AI-Prompt-Tokens": {"many"}}, want: true},
		{name: "prompt_tokens/negative", src: `prompt_tokens == -1`, header: map[string][]string{"AI-Prompt-Tokens": {"-5"}}, want: true},
		{name: "deadline/invalid", src: `deadline == timestamp("9999-12-31T23:59:59.999999999Z")`, header: map[string][]string{"AI-Deadline": {"soon"}}, want: true},

		{name: "spelling/lower case", src: `model == "m" && tenant == "t"`, header: map[string][]string{"ai-model": {"m"}, "AI-TENANT": {"t"}}, want: true},
		{name: "spelling/aliases", src: `model_version == "v" && adapter == "a" && intent == "i"`,
			header: map[string][]string{"X-Model-Version": {"v"}, "X-Lora-Adapter-ID": {"a"}, "x-ai-intent": {"i"}}, want: true},
		{name: "spelling/canonical wins", src: `adapter == "canonical"`,
			header: map[string][]string{"X-Lora-Adapter-ID": {"alias"}, "AI-Adapter": {"canonical"}}, want: true},

		{name: "cross-type numbers", src: `prompt_tokens > 1000.5 && priority < 1.5`, header: h, want: true},
		{name: "string extensions", src: `model.lowerAscii().split("-")[0] == "llama3"`, header: map[string][]string{"AI-Model": {"LLAMA3-8B"}}, want: true},
	})
}

func TestPayload(t *testing.T) {
	runMatchCases(t, []matchCase{
		{name: "number", src: `payload.confidence > 0.85`, data: chat, want: true},
		{name: "number/int literal", src: `payload.count == 3 && payload.count > 2 && payload.count < 3.5`, data: chat, want: true},
		{name: "number/is double", src: `type(payload.count) == double`, data: chat, want: true},
		{name: "number/negative exponent", src: `payload.neg == -0.0025`, data: chat, want: true},
		{name: "number/overflow is infinity", src: `payload.big > 1e308`, data: chat, want: true},
		{name: "bool", src: `payload.flag && !payload.off`, data: chat, want: true},
		{name: "null", src: `payload.nothing == null`, data: chat, want: true},
		{name: "string", src: `payload.model.startsWith("llama3")`, data: chat, want: true},
		{name: "string/escapes", src: `payload.esc == "a\"b\\c\nd"`, data: chat, want: true},
		{name: "string/unicode escapes", src: `payload.uni == "café 😀" && size(payload.uni) == 6`, data: chat, want: true},
		{name: "key/escaped", src: `payload["we\"ird"] == 1`, data: chat, want: true},
		{name: "key/with dot", src: `payload["a.b"] == 2`, data: chat, want: true},
		{name: "key/empty", src: `payload[""] == "blank key"`, data: chat, want: true},
		{name: "key/duplicate first wins", src: `payload.dup == 1`, data: chat, want: true},

		{name: "nested", src: `payload.user.name == "ann" && payload.user.address.city == "Oslo"`, data: chat, want: true},
		{name: "array index", src: `payload.messages[0].role == "system" && payload.messages[1].role == "user"`, data: chat, want: true},
		{name: "array index/double", src: `payload.tags[1.0] == "urgent"`, data: chat, want: true},
		{name: "array index/deep", src: `payload.messages[1].parts[1].n == 2 && payload.matrix[1][0] == 3`, data: chat, want: true},
		{name: "array/size", src: `size(payload.tags) == 3 && payload.tags.size() == 3 && size(payload.empty) == 0`, data: chat, want: true},
		{name: "array/in", src: `"urgent" in payload.tags && !("nope" in payload.tags)`, data: chat, want: true},
		{name: "array/exists", src: `payload.tags.exists(t, t == "urgent")`, data: chat, want: true},
		{name: "array/exists none", src: `payload.tags.exists(t, t == "calm")`, data: chat, want: false},
		{name: "array/all", src: `payload.messages.all(m, has(m.role))`, data: chat, want: true},
		{name: "array/exists_one", src: `payload.messages.exists_one(m, m.role == "user")`, data: chat, want: true},
		{name: "array/filter map", src: `payload.messages.filter(m, m.role == "user").map(m, m.content) == ["hi there"]`, data: chat, want: true},
		{name: "array/empty exists", src: `payload.empty.exists(x, true)`, data: chat, want: false},
		{name: "array/equality", src: `payload.tags == ["finance", "urgent", "board"] && ["finance", "urgent", "board"] == payload.tags`, data: chat, want: true},
		{name: "array/inequality", src: `payload.tags != ["finance"]`, data: chat, want: true},
		{name: "array/concat", src: `payload.tags + ["x"] == ["finance", "urgent", "board", "x"]`, data: chat, want: true},
		{name: "array/nested equality", src: `payload.matrix == [[1, 2], [3, 4]]`, data: chat, want: true},
		{name: "object/equality", src: `payload.user.address == {"city": "Oslo"} && {"city": "Oslo"} == payload.user.address`, data: chat, want: true},
		{name: "object/size", src: `size(payload.user) == 3`, data: chat, want: true},
		{name: "object/in", src: `"name" in payload.user && !("nope" in payload.user)`, data: chat, want: true},
		{name: "object/exists keys", src: `payload.user.exists(k, k == "age") && payload.user.all(k, k != "")`, data: chat, want: true},
		{name: "object/type", src: `type(payload.user) == map && type(payload.tags) == list`, data: chat, want: true},

		{name: "has", src: `has(payload.user) && has(payload.user.name) && !has(payload.nope) && !has(payload.user.nope)`, data: chat, want: true},
		{name: "has/null member", src: `has(payload.nothing)`, data: chat, want: true},
		{name: "optional", src: `payload.?nope.orValue("d") == "d" && payload.?user.name.orValue("") == "ann"`, data: chat, want: true},

		{name: "top-level array", src: `payload[0] == 1 && size(payload) == 3 && payload.exists(x, x == 3)`, data: ` [1, 2, 3] `, want: true},
		{name: "top-level string", src: `payload == "hello"`, data: `"hello"`, want: true},
		{name: "top-level number", src: `payload == 42`, data: "42\n", want: true},
		{name: "top-level null", src: `payload == null`, data: `null`, want: true},

		{name: "missing field", src: `payload.confidence > 0.85`, data: `{"other": 1}`, wantErr: "no such key: confidence"},
		{name: "missing nested field", src: `payload.user.nope == "x"`, data: chat, wantErr: "no such key: nope"},
		{name: "index out of range", src: `payload.tags[3] == "x"`, data: chat, wantErr: "index out of bounds"},
		{name: "negative index", src: `payload.tags[-1] == "x"`, data: chat, wantErr: "index out of bounds"},
		{name: "field of array", src: `payload.tags.first == "x"`, data: chat, wantErr: "unsupported index type"},
		{name: "field of string", src: `payload.model.x == "x"`, data: chat, wantErr: "no such key"},
		{name: "type mismatch/compare", src: `payload.model > 3`, data: chat, wantErr: "no such overload"},
		{name: "type mismatch/function", src: `payload.count.startsWith("3")`, data: chat, wantErr: "no such overload"},
		{name: "type mismatch/dyn filter", src: `payload.model`, data: chat, wantErr: "filter result is string, not bool"},
		{name: "dyn filter bool", src: `payload.flag`, data: chat, want: true},

		{name: "not JSON/text", src: `payload.x == 1`, data: "hello world", wantErr: "the payload is not JSON"},
		{name: "not JSON/is null", src: `payload == null`, data: "hello world", want: true},
		{name: "not JSON/has", src: `has(payload.x)`, data: "\x00\x01binary", want: false},
		{name: "not JSON/empty", src: `payload == null`, data: "", want: true},
		{name: "not JSON/truncated", src: `payload == null`, data: `{"a": 1`, want: true},
		{name: "not JSON/trailing garbage", src: `payload == null`, data: `42 43`, want: true},
		{name: "not JSON/bad literal", src: `payload == null`, data: `nul`, want: true},
		{name: "not JSON/envelope still works", src: `model == "m"`, header: map[string][]string{"AI-Model": {"m"}}, data: "\xff\xfe", want: true},
		{name: "malformed member", src: `payload.a == 1 && payload.b == 2`, data: `{"a": 1, "b": tru}`, wantErr: "malformed JSON value"},
		{name: "malformed after the member read", src: `payload.a == 1`, data: `{"a": 1, "b": }`, want: true},
	})
}

// TestConfidenceFilter is the example of the issue: 200 messages with
// confidence i/200; the filter keeps exactly those with i > 170, in order.
func TestConfidenceFilter(t *testing.T) {
	p, err := testEnv(t).Compile(`payload.confidence > 0.85`)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for i := range 200 {
		data := fmt.Sprintf(`{"id":%d,"confidence":%v}`, i, float64(i)/200)
		ok, err := p.Match(Message{Subject: "ai.feedback", Data: []byte(data)})
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if ok {
			got = append(got, i)
		}
	}
	if len(got) != 29 {
		t.Fatalf("matched %d messages, want 29: %v", len(got), got)
	}
	for k, i := range got {
		if i != 171+k {
			t.Fatalf("match %d is message %d, want %d", k, i, 171+k)
		}
	}
}

// TestModelRouting runs the routing rules of the source articles: requests
// for llama3 and gemma2 models go to their own pools.
func TestModelRouting(t *testing.T) {
	e := testEnv(t)
	rules := []struct{ dest, src string }{
		{"pool.llama3", `model.startsWith("llama3")`},
		{"pool.gemma2", `model.startsWith("gemma2")`},
	}
	progs := make([]*Program, len(rules))
	for i, r := range rules {
		p, err := e.Compile(r.src)
		if err != nil {
			t.Fatal(err)
		}
		progs[i] = p
	}
	for model, want := range map[string]string{
		"llama3-8b-instruct": "pool.llama3",
		"llama3.1:70b":       "pool.llama3",
		"gemma2-9b-it":       "pool.gemma2",
		"llama2-13b":         "",
		"mistral-7b":         "",
		"":                   "",
	} {
		h := map[string][]string{}
		if model != "" {
			h["AI-Model"] = []string{model}
		}
		got := ""
		for i, p := range progs {
			ok, err := p.Match(Message{Subject: "ai.inference.llm", Header: h, Data: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				got = rules[i].dest
				break
			}
		}
		if got != want {
			t.Errorf("model %q routed to %q, want %q", model, got, want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	e := testEnv(t)
	cases := []struct {
		name      string
		src       string
		key       bool
		line, col int
		msg       string
	}{
		{"unknown variable", `modle == "x"`, false, 1, 1, "undeclared reference to 'modle' (did you mean 'model'?)"},
		{"unknown variable listed", `x > 1`, false, 1, 1, "(the variables are subject, headers, payload,"},
		{"unknown variable on line 2", "model == \"a\" &&\n  bogus", false, 2, 3, "undeclared reference to 'bogus'"},
		{"syntax error", `model ==`, false, 1, 9, "syntax error: unexpected end of expression"},
		{"syntax error mid", `model == "a" && && tenant == "b"`, false, 1, 17, "syntax error"},
		{"unknown function", `model.startswith("x")`, false, 1, 17, "undeclared reference to 'startswith' (did you mean 'startsWith'?)"},
		{"wrong argument type", `priority == "high"`, false, 1, 10, "found no matching overload for '_==_'"},
		{"non-bool filter", `priority + 1`, false, 1, 1, "a filter must be a bool expression; this one is int"},
		{"non-bool filter string", "  \n model", false, 2, 2, "a filter must be a bool expression; this one is string"},
		{"non-bool filter timestamp", `deadline`, false, 1, 1, "this one is timestamp"},
		{"bool key", `priority > 1`, true, 1, 1, "a key must be a string or int expression; this one is bool"},
		{"list key", `[model]`, true, 1, 1, "this one is list(string)"},
		{"empty", ``, false, 1, 1, "syntax error"},
		{"too long", `model == "` + strings.Repeat("x", MaxSourceLen) + `"`, false, 1, 1, "the limit is 8192"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			compile := e.Compile
			if c.key {
				compile = e.CompileKey
			}
			p, err := compile(c.src)
			if err == nil {
				t.Fatalf("Compile(%q) = %v, want an error", c.src, p)
			}
			if !errors.Is(err, ErrCompile) {
				t.Errorf("error %v does not match ErrCompile", err)
			}
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *CompileError", err)
			}
			if ce.Line != c.line || ce.Column != c.col {
				t.Errorf("position %d:%d, want %d:%d (%v)", ce.Line, ce.Column, c.line, c.col, err)
			}
			if !strings.Contains(ce.Msg, c.msg) {
				t.Errorf("message %q, want it to contain %q", ce.Msg, c.msg)
			}
			if want := fmt.Sprintf("%d:%d: ", c.line, c.col); !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q, want prefix %q", err.Error(), want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("Error() has more than one line: %q", err.Error())
			}
		})
	}
}

func TestKey(t *testing.T) {
	e := testEnv(t)
	data := []byte(`{"user": {"id": "u-7", "n": 42, "ratio": 0.5, "flag": true}, "big": 1e300}`)
	m := Message{Header: fullHeader, Data: data}
	cases := []struct {
		src, want, wantErr string
	}{
		{src: `session`, want: "s-42"},
		{src: `tenant + "/" + session`, want: "acme/s-42"},
		{src: `priority`, want: "1"},
		{src: `payload.user.id`, want: "u-7"},
		{src: `payload.user.n`, want: "42"},
		{src: `payload.user.ratio`, wantErr: "key is 0.5, not an integer"},
		{src: `payload.big`, wantErr: "not an integer"},
		{src: `payload.user.flag`, wantErr: "key is bool, not string or int"},
		{src: `payload.user.nope`, wantErr: "no such key"},
	}
	for _, c := range cases {
		t.Run(c.src, func(t *testing.T) {
			p, err := e.CompileKey(c.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Key(m)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ErrEval) {
					t.Fatalf("Key = %q, %v; want error containing %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Key = %q, %v; want %q", got, err, c.want)
			}
		})
	}

	t.Run("does not alias the payload", func(t *testing.T) {
		buf := []byte(`{"k": "abc"}`)
		p, err := e.CompileKey(`payload.k`)
		if err != nil {
			t.Fatal(err)
		}
		k, err := p.Key(Message{Data: buf})
		if err != nil || k != "abc" {
			t.Fatalf("Key = %q, %v", k, err)
		}
		copy(buf, `{"k": "xyz"}`)
		if k != "abc" {
			t.Fatalf("key changed with the buffer: %q", k)
		}
	})
}

func TestWrongKind(t *testing.T) {
	e := testEnv(t)
	f, err := e.Compile(`model == "x"`)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.CompileKey(`model`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Key(Message{}); !errors.Is(err, ErrKind) {
		t.Errorf("Key on a filter: %v, want ErrKind", err)
	}
	if _, err := k.Match(Message{}); !errors.Is(err, ErrKind) {
		t.Errorf("Match on a key: %v, want ErrKind", err)
	}
	// Eval serves both.
	if v, err := f.Eval(Message{}); err != nil || v != types.False {
		t.Errorf("Eval of a filter = %v, %v", v, err)
	}
	if v, err := k.Eval(Message{}); err != nil || v != types.String("") {
		t.Errorf("Eval of a key = %v, %v", v, err)
	}
}

var mapStringAny = reflect.TypeOf(map[string]any{})

func TestEval(t *testing.T) {
	e := testEnv(t)
	p, err := e.CompileKey(`payload.user`)
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.Eval(Message{Data: []byte(chat)})
	if err != nil {
		t.Fatal(err)
	}
	native, err := v.ConvertToNative(mapStringAny)
	if err != nil {
		t.Fatal(err)
	}
	u := native.(map[string]any)
	if u["name"] != "ann" || u["age"] != 30.0 || u["address"].(map[string]any)["city"] != "Oslo" {
		t.Errorf("payload.user as Go = %#v", u)
	}

	p, err = e.Compile(`payload.tags.map(t, t.upperAscii()) == ["FINANCE", "URGENT", "BOARD"]`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Match(Message{Data: []byte(chat)}); !ok || err != nil {
		t.Errorf("map macro: %v, %v", ok, err)
	}
}

func TestCache(t *testing.T) {
	e := testEnv(t)
	src := `tenant == "cache-test"`
	a, err := e.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Compile(src)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the same source compiled twice gave two programs")
	}
	k, err := e.CompileKey(`tenant`)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := e.Compile(`tenant`); err == nil || f == k {
		t.Errorf("a key program was served as a filter: %v, %v", f, err)
	}
	if _, err := e.Compile(`nope`); err == nil {
		t.Error("bad source compiled")
	}

	c := newLRU(2)
	p1, p2, p3 := &Program{src: "1"}, &Program{src: "2"}, &Program{src: "3"}
	c.put(cacheKey{"1", kindFilter}, p1)
	c.put(cacheKey{"2", kindFilter}, p2)
	if c.get(cacheKey{"1", kindFilter}) != p1 { // 1 is now the most recent
		t.Fatal("lost 1")
	}
	c.put(cacheKey{"3", kindFilter}, p3) // evicts 2
	if c.get(cacheKey{"2", kindFilter}) != nil {
		t.Error("2 should have been evicted")
	}
	if c.get(cacheKey{"1", kindFilter}) != p1 || c.get(cacheKey{"3", kindFilter}) != p3 {
		t.Error("1 or 3 missing")
	}
	c.put(cacheKey{"3", kindFilter}, p3)
	if c.len() != 2 {
		t.Errorf("len %d, want 2", c.len())
	}
}

func TestCostLimit(t *testing.T) {
	// The deadline is a backstop; here the cost limit must trip first,
	// however slow the machine (or the race detector).
	e, err := NewEnvConfig(Config{EvalTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Quadratic in the payload: 3,000² steps is far past CostLimit.
	for _, src := range []string{
		`payload.messages.exists(m, m.content.contains("refund"))`,
		`payload.s.split(",").exists(a, payload.s.split(",").exists(b, a == b))`,
	} {
		p, err := e.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if !p.metered {
			t.Errorf("%s is not metered", src)
		}
	}
	p, err := e.Compile(`payload.xs.all(x, payload.xs.all(y, x + y >= 0.0))`)
	if err != nil {
		t.Fatal(err)
	}
	if !p.metered {
		t.Fatal("a quadratic comprehension over the payload is not metered")
	}
	var sb strings.Builder
	sb.WriteString(`{"xs":[0`)
	for i := 1; i < 3000; i++ {
		sb.WriteString(",1")
	}
	sb.WriteString("]}")
	ok, err := p.Match(Message{Data: []byte(sb.String())})
	if ok || err == nil || !strings.Contains(err.Error(), "cost limit") || !errors.Is(err, ErrEval) {
		t.Fatalf("Match = %v, %v; want a cost limit error", ok, err)
	}
	// The same program on a small payload is fine.
	if ok, err := p.Match(Message{Data: []byte(`{"xs":[1,2,3]}`)}); !ok || err != nil {
		t.Fatalf("small payload: %v, %v", ok, err)
	}
	// Programs that do at most a pass over the payload are not metered.
	for _, src := range []string{
		`payload.tags.exists(t, t == "urgent")`,
		`payload.exists(k, k == "a") && size(payload.s) > 3`,
		`payload.confidence > 0.85 && model.startsWith("llama")`,
		`headers.exists(k, k.startsWith("X-"))`,
		`model.contains(tenant) && subject.endsWith(".llm")`,
	} {
		p, err := e.Compile(src)
		if err != nil {
			t.Fatal(err)
		}
		if p.metered {
			t.Errorf("%s is metered", src)
		}
	}
}

func TestConcurrent(t *testing.T) {
	e := testEnv(t)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				src := fmt.Sprintf(`payload.n == %d.0 && tenant == "t%d"`, i%7, g)
				p, err := e.Compile(src)
				if err != nil {
					t.Error(err)
					return
				}
				m := Message{
					Header: map[string][]string{"AI-Tenant": {fmt.Sprintf("t%d", g)}},
					Data:   fmt.Appendf(nil, `{"n": %d}`, i%7),
				}
				if ok, err := p.Match(m); !ok || err != nil {
					t.Errorf("goroutine %d, message %d: %v, %v", g, i, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestDeadlineOffset checks a deadline with an offset reads as the
// same instant.
func TestDeadlineOffset(t *testing.T) {
	p, err := testEnv(t).Compile(`deadline == timestamp("2026-01-02T14:04:05Z") && deadline.getHours() == 14`)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string][]string{"AI-Deadline": {"2026-01-02T15:04:05+01:00"}}
	if ok, err := p.Match(Message{Header: h}); !ok || err != nil {
		t.Fatalf("Match = %v, %v", ok, err)
	}
}
