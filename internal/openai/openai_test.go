package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseChatRequest(t *testing.T) {
	r, err := ParseChatRequest([]byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,
		"temperature":0.2,"tools":[{"type":"function"}],
		"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Stream || !r.StreamOptions.IncludeUsage || r.Limit() != 5 {
		t.Fatalf("parsed %+v", r)
	}
	if got := r.Prompt(); got != "system: be brief\nuser: a\n\nb" {
		t.Fatalf("prompt %q", got)
	}
	bad := map[string]string{
		`[]`:                            "parse the JSON",
		`{"model":"m","messages":[]} x`: "after its JSON",
		`{"model":1}`:                   "'model'",
		`{"model":"m","messages":[{"role":"user","content":{}}]}`:                 "messages[0].content",
		`{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`: "max_tokens",
	}
	for in, want := range bad {
		_, err := ParseChatRequest([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseChatRequest(%s) = %v, want %q", in, err, want)
		}
	}
}

func TestErrorJSON(t *testing.T) {
	b, _ := json.Marshal(ErrorBody{Error: &Error{Message: "m", Type: TypeNotFound, Code: Str("model_not_found")}})
	if string(b) != `{"error":{"message":"m","type":"not_found_error","param":null,"code":"model_not_found"}}` {
		t.Fatalf("%s", b)
	}
	var e Error
	if err := json.Unmarshal([]byte(`{"message":"x","type":"t","code":429}`), &e); err != nil || *e.Code != "429" {
		t.Fatalf("numeric code: %v %v", e, err)
	}
}

// FuzzParseChatRequest: request bodies come from any HTTP client. Parsing
// never panics, and what it accepts has a model and messages and reads
// back the same.
func FuzzParseChatRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`))
	f.Add([]byte(`{"model":"m","n":1,"max_completion_tokens":3,"messages":[{"role":"tool","content":null,"tool_call_id":"c"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseChatRequest(body)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		if r.Model == "" || len(r.Messages) == 0 {
			t.Fatalf("accepted a request without model or messages: %s", body)
		}
		_ = r.Prompt()
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		if _, err := ParseChatRequest(b); err != nil {
			t.Fatalf("re-encoded request refused: %v\n%s", err, b)
		}
	})
}
