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
