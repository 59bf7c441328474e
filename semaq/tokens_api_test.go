package semaq

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTokenChunkRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		c    TokenChunk
	}{
		{"text", TokenChunk{Seq: 1, Offset: 0, N: 1, Text: "Hello"}},
		{"escapes", TokenChunk{Seq: 2, Offset: 7, N: 1, Text: "a\"b\\c\n\t\x01 <é> \u2028"}},
		{"merged", TokenChunk{Seq: 3, Offset: 9, N: 3, Text: "abcdef", Lens: []int{1, 2, 3}}},
		{"function", TokenChunk{Seq: 4, Offset: 12, N: 1, Func: &FunctionCallFragment{Index: 1, ID: "call_1", Name: "get_weather", Arguments: `{"city":`}}},
		{"trace", TokenChunk{Seq: 5, Offset: 13, N: 1, Text: "x", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Session: "s-1"}},
		{"final", TokenChunk{Seq: 6, Offset: 14, Final: &TokenFinal{FinishReason: "stop", Usage: &TokenUsage{Prompt: 3, Completion: 14, Total: 17}}}},
		{"error", TokenChunk{Seq: 7, Offset: 14, Error: &TokenError{Code: TokenErrWorkerLost, Message: "worker w1 stopped"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := AppendTokenChunk(nil, &tc.c)
			if !json.Valid(b) {
				t.Fatalf("encoding is not JSON: %s", b)
			}
			got, err := ParseTokenChunk(b)
			if err != nil {
				t.Fatalf("parse %s: %v", b, err)
			}
			if !reflect.DeepEqual(*got, tc.c) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", *got, tc.c)
			}
			// The hand-written encoder agrees with encoding/json.
			var viaStd TokenChunk
			std, _ := json.Marshal(tc.c)
			if err := json.Unmarshal(std, &viaStd); err != nil || !reflect.DeepEqual(viaStd, *got) {
				t.Fatalf("encoding/json disagrees: %s vs %s", std, b)
			}
		})
	}
}

func TestParseTokenChunkRejects(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"not json":        {`{"s":`, "not valid JSON"},
		"seq zero":        {`{"s":0,"o":0,"t":"x"}`, "seq must be 1"},
		"final and error": {`{"s":1,"o":0,"fin":{"r":"stop"},"err":{"c":"x","m":""}}`, "both final and error"},
		"terminal tokens": {`{"s":1,"o":0,"n":1,"t":"x","fin":{"r":"stop"}}`, "carries no tokens"},
		"lens mismatch":   {`{"s":1,"o":0,"n":2,"t":"abc","l":[1,1]}`, "add up to"},
		"lens count":      {`{"s":1,"o":0,"n":3,"t":"ab","l":[1,1]}`, "2 lengths for 3 tokens"},
		"negative n":      {`{"s":1,"o":0,"n":-1}`, "outside"},
		"no reason":       {`{"s":1,"o":0,"fin":{"r":""}}`, "finish reason"},
		"no code":         {`{"s":1,"o":0,"err":{"c":"","m":"x"}}`, "needs a code"},
		"bad index":       {`{"s":1,"o":0,"n":1,"f":{"i":-1}}`, "index"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseTokenChunk([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseTokenChunk(%s) = %v, want error containing %q", tc.in, err, tc.want)
			}
		})
	}
}

func TestTokenErrorIs(t *testing.T) {
	err := error(&TokenError{Code: TokenErrWorkerLost, Message: "gone"})
	if !errors.Is(err, ErrTokenAborted) {
		t.Fatal("TokenError does not match ErrTokenAborted")
	}
	if !errors.Is(err, &TokenError{Code: TokenErrWorkerLost}) || errors.Is(err, &TokenError{Code: TokenErrUpstream}) {
		t.Fatal("TokenError code matching is wrong")
	}
}

func TestCheckRequestID(t *testing.T) {
	for _, ok := range []string{"a", "req-1_B", strings.Repeat("x", MaxRequestID)} {
		if err := CheckRequestID(ok); err != nil {
			t.Errorf("CheckRequestID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b", strings.Repeat("x", MaxRequestID+1)} {
		if err := CheckRequestID(bad); err == nil {
			t.Errorf("CheckRequestID(%q) accepted", bad)
		}
	}
}

func FuzzTokenChunk(f *testing.F) {
	f.Add([]byte(`{"s":1,"o":0,"n":1,"t":"Hello"}`))
	f.Add([]byte(`{"s":3,"o":9,"n":3,"t":"abcdef","l":[1,2,3]}`))
	f.Add([]byte(`{"s":4,"o":1,"n":1,"f":{"i":0,"id":"c","n":"f","a":"{\"a\":"}}`))
	f.Add([]byte(`{"s":6,"o":14,"fin":{"r":"stop","u":{"p":1,"c":2,"t":3}},"tp":"00-x","ss":"s"}`))
	f.Add([]byte(`{"s":7,"o":14,"err":{"c":"worker_lost","m":"\u2028\ud800"}}`))
	f.Add([]byte(`{"s":1,"o":0,"n":1,"t":"a","s":2}`))
	f.Add([]byte(`{"s":01,"o":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fast path agrees with encoding/json wherever it answers.
		var fast TokenChunk
		if parsePlainChunk(data, &fast) {
			var slow TokenChunk
			if err := json.Unmarshal(data, &slow); err != nil {
				t.Fatalf("fast path took what encoding/json refuses (%v): %q", err, data)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast %+v, encoding/json %+v: %q", fast, slow, data)
			}
		}
		c, err := ParseTokenChunk(data)
		if err != nil {
			return
		}
		b := AppendTokenChunk(nil, c)
		if !json.Valid(b) {
			t.Fatalf("re-encoding is not JSON: %s", b)
		}
		c2, err := ParseTokenChunk(b)
		if err != nil {
			t.Fatalf("re-encoding does not parse: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", c, c2)
		}
	})
}

func BenchmarkTokenChunk(b *testing.B) {
	c := TokenChunk{Seq: 12345, Offset: 12344, N: 1, Text: " token",
		TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Session: "sess-42"}
	enc := AppendTokenChunk(nil, &c)
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			buf = AppendTokenChunk(buf[:0], &c)
		}
		b.SetBytes(int64(len(enc)))
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(&c)
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParseTokenChunk(enc); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(enc)))
	})
}

func TestInferQueue(t *testing.T) {
	cases := map[string]string{
		"llama3-8b":               "INFER_llama3-8b",
		"meta-llama/Llama-3.1-8B": "INFER_meta-llama_Llama-3_1-8B-",
		"meta-llama/Llama-3_1-8B": "INFER_meta-llama_Llama-3_1-8B-",
	}
	seen := map[string]string{}
	for model, prefix := range cases {
		q := InferQueue(model)
		if !strings.HasPrefix(q, prefix) || CheckStreamName(q) != nil || CheckSubject(InferSubject(model), false) != nil {
			t.Errorf("InferQueue(%q) = %q, subject %q", model, q, InferSubject(model))
		}
		if other, dup := seen[q]; dup {
			t.Errorf("models %q and %q share queue %s", model, other, q)
		}
		seen[q] = model
	}
	if CheckModel("a b") == nil || CheckModel("") == nil || CheckModel("gpt-4o") != nil {
		t.Error("CheckModel")
	}
}

func TestTokenSubjects(t *testing.T) {
	for _, tc := range []struct {
		tenant, want string
	}{
		{"acme", "$SQ.tok.acme.req-1.c"},
		{"", "$SQ.tok.$none.req-1.c"},
		{"not a name", "$SQ.tok.$none.req-1.c"}, // auth off: AI-Tenant is anything
		{"*", "$SQ.tok.$none.req-1.c"},          // a wildcard is never a stored tenant
		{">", "$SQ.tok.$none.req-1.c"},
	} {
		if got := TokenChunkSubject(tc.tenant, "req-1"); got != tc.want {
			t.Errorf("TokenChunkSubject(%q): %s, want %s", tc.tenant, got, tc.want)
		}
	}
	if got := TokenSubjectFilter(TokenAnyTenant, "req-1"); got != "$SQ.tok.*.req-1.*" {
		t.Errorf("any tenant's filter: %s", got)
	}
	if got := TokenLiveFilter("acme", "req-1"); got != "$SQ.w.$tokl.acme.req-1.*" {
		t.Errorf("live filter: %s", got)
	}
	for subj, want := range map[string]bool{
		"$SQ.tok.acme.req-1.c":         true,
		"$SQ.tok.$none.req-1.end":      true,
		"$SQ.w.$tokl.acme.req-1.end":   true,
		"$SQ.tok.req-1.c":              false, // the layout before tenants
		"$SQ.tok.$barrier.x":           false,
		"$SQ.tok.a.b.c.d":              false,
		"$SQ.tok.*.req-1.c":            false,
		"$SQ.tok.$other.req-1.c":       false,
		"$SQ.tok.acme.req-1.x":         false,
		"$SQ.tok.acme.req.1.c":         false,
		"ai.tok.acme.req-1.c":          false,
		"$SQ.tok.acme..c":              false,
		"$SQ.tok." + longName + ".x.c": false,
	} {
		if _, _, _, ok := ParseTokenSubject(subj); ok != want {
			t.Errorf("ParseTokenSubject(%q) ok=%v, want %v", subj, ok, want)
		}
	}
}

var longName = strings.Repeat("a", MaxNameLen+1)

// FuzzParseTokenSubject: what parses is one stream's stored subject, and
// building it again gives the same subject.
func FuzzParseTokenSubject(f *testing.F) {
	for _, s := range []string{"$SQ.tok.acme.req-1.c", "$SQ.tok.$none.r.end", "$SQ.w.$tokl.t.r.c", "$SQ.tok.r.c", "$SQ.tok.a.b.c.d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subj string) {
		tenant, id, end, ok := ParseTokenSubject(subj)
		if !ok {
			return
		}
		if CheckRequestID(id) != nil || tenant != TokenNoTenant && CheckName(tenant) != nil {
			t.Fatalf("%q parsed to tenant %q id %q", subj, tenant, id)
		}
		if TokenTenant(tenant) != tenant {
			t.Fatalf("%q: tenant %q is not a stored tenant token", subj, tenant)
		}
		again := TokenChunkSubject(tenant, id)
		if end {
			again = TokenEndSubject(tenant, id)
		}
		if strings.HasPrefix(subj, TokenLivePrefix) {
			again = TokenLivePrefix + strings.TrimPrefix(again, TokenPrefix)
		}
		if again != subj {
			t.Fatalf("%q parsed and built again is %q", subj, again)
		}
	})
}
