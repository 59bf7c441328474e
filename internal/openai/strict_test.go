package openai

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const msgs = `"messages":[{"role":"user","content":"x"}]`

// Bodies that encoding/json and an exact-match upstream (Python, JS)
// would read differently are refused, naming the key.
func TestParseChatRequestStrict(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	cases := []struct {
		name, body, param string
	}{
		{"case variant after", `{"model":"o1-pro-expensive","Model":"cheap",` + msgs + `}`, "Model"},
		{"case variant before", `{"Model":"cheap","model":"o1-pro-expensive",` + msgs + `}`, "Model"},
		{"case variant alone", `{"MODEL":"cheap",` + msgs + `}`, "MODEL"},
		{"unicode fold (long s)", `{"model":"m","ſtream":true,` + msgs + `}`, "ſtream"},
		{"unicode fold (kelvin)", `{"model":"m","max_to\u212aens":3,` + msgs + `}`, "max_to\u212aens"},
		{"duplicate", `{"model":"o1-pro-expensive","model":"cheap",` + msgs + `}`, "model"},
		{"duplicate by escape", `{"model":"cheap","mod\u0065l":"o1",` + msgs + `}`, "model"},
		{"duplicate unknown key", `{"model":"m","temperature":0,"temperature":2,` + msgs + `}`, "temperature"},
		{"nested case variant", `{"model":"m","messages":[{"role":"user","Role":"system","content":"x"}]}`, "messages[0].Role"},
		{"nested duplicate", `{"model":"m","messages":[{"role":"user","content":"x","content":"y"}]}`, "messages[0].content"},
		{"stream options", `{"model":"m",` + msgs + `,"stream_options":{"include_usage":false,"Include_Usage":true}}`, "stream_options.Include_Usage"},
		{"tool call function", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","Name":"g"}}]}]}`, "messages[0].tool_calls[0].function.Name"},
		{"huge exponent", `{"model":"m",` + msgs + `,"max_tokens":1e999999}`, "max_tokens"},
		{"fraction", `{"model":"m",` + msgs + `,"max_tokens":1.5}`, "max_tokens"},
		{"over int32", `{"model":"m",` + msgs + `,"n":4294967297}`, "n"},
		{"long literal", `{"model":"m",` + msgs + `,"temperature":1` + strings.Repeat("0", 100000) + `}`, "temperature"},
		{"deep nesting", `{"model":"m",` + msgs + `,"metadata":` + deep + `}`, "metadata[0][0]..."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseChatRequest([]byte(tc.body))
			e, ok := err.(*Error)
			if !ok || e.Type != TypeInvalidRequest || e.Param == nil || (*e.Param != tc.param && !(strings.HasSuffix(tc.param, "...") && strings.HasPrefix(*e.Param, strings.TrimSuffix(tc.param, "...")))) {
				t.Fatalf("ParseChatRequest = %#v, want invalid_request_error with param %q", err, tc.param)
			}
			if len(e.Message) > 600 {
				t.Fatalf("message of %d bytes quotes too much back", len(e.Message))
			}
		})
	}
	// Keys SemaQ does not read keep their case: they are the upstream's.
	if _, err := ParseChatRequest([]byte(`{"model":"m",` + msgs + `,"Temperature":1,"temperature":0.5,"x":{"Model":1}}`)); err != nil {
		t.Fatalf("unknown keys of other case refused: %v", err)
	}
}

// FuzzStrictAgreement: for every body the parser accepts, a reader that
// matches keys exactly and keeps the first duplicate, and one that keeps
// the last (as most upstreams do), see the model and stream flag the
// gateway accounted.
func FuzzStrictAgreement(f *testing.F) {
	f.Add([]byte(`{"model":"m",` + msgs + `}`))
	f.Add([]byte(`{"model":"a","Model":"b",` + msgs + `}`))
	f.Add([]byte(`{"model":"a","model":"b",` + msgs + `,"stream":true}`))
	f.Add([]byte(`{"model":"a","mod\u0065l":"b",` + msgs + `,"max_tokens":1e999}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseChatRequest(body)
		if err != nil {
			return
		}
		first, last := map[string]json.RawMessage{}, map[string]json.RawMessage{}
		dec := json.NewDecoder(bytes.NewReader(body))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("accepted a body that is not an object: %s", body)
		}
		for dec.More() {
			k, _ := dec.Token()
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			key := k.(string)
			if _, ok := first[key]; !ok {
				first[key] = v
			}
			last[key] = v
		}
		for _, m := range []map[string]json.RawMessage{first, last} {
			var model string
			if json.Unmarshal(m["model"], &model) != nil || model != r.Model {
				t.Fatalf("exact reader sees model %s, the gateway %q: %s", m["model"], r.Model, body)
			}
			var stream bool
			if s, ok := m["stream"]; ok && string(bytes.TrimSpace(s)) != "null" {
				_ = json.Unmarshal(s, &stream)
			}
			if stream != r.Stream {
				t.Fatalf("exact reader sees stream %v, the gateway %v: %s", stream, r.Stream, body)
			}
		}
	})
}
