package httpx

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

type inner struct {
	Model string `json:"model"`
}

type body struct {
	Action string            `json:"action"`
	N      int64             `json:"n,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	In     *inner            `json:"in,omitempty"`
	List   []inner           `json:"list,omitempty"`
	Raw    json.RawMessage   `json:"raw,omitempty"`
}

func TestDecodeStrictRefuses(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"labels":`, 1) + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "}"
	for _, tc := range []struct {
		name, body, want string
	}{
		{"duplicate", `{"action":"ack","action":"term"}`, `key "action" appears twice`},
		{"case variant duplicate", `{"action":"ack","ACTION":"term"}`, "differ only in case"},
		{"fold variant duplicate", `{"action":"ack","AcTIOn":"term"}`, "differ only in case"},
		{"long s fold", "{\"labels\":{},\"label\u017f\":{}}", "differ only in case"},
		{"case variant alone", `{"Action":"ack"}`, `must be spelled "action"`},
		{"long s alone", "{\"label\u017f\":{}}", `must be spelled "labels"`},
		{"nested duplicate", `{"in":{"model":"a","MODEL":"b"}}`, "differ only in case"},
		{"nested case variant", `{"in":{"Model":"x"}}`, `must be spelled "model"`},
		{"nested in slice", `{"list":[{"model":"a"},{"model":"a","model":"b"}]}`, "appears twice"},
		{"duplicate map key", `{"labels":{"a":"1","a":"2"}}`, "appears twice"},
		{"duplicate raw key", `{"raw":{"x":{"a":1,"a":2}}}`, "appears twice"},
		{"unknown", `{"action":"ack","extra":1}`, `unknown key "extra"`},
		{"long number", `{"n":` + strings.Repeat("9", 5000) + `}`, "number literal is 5000 characters"},
		{"long float", `{"n":1` + strings.Repeat("0", 30) + `e-30}`, "the limit is 24"},
		{"deep", deep, "nested deeper"},
		{"trailing", `{"action":"ack"} {}`, "after the JSON value"},
		{"not json", `action=ack`, "not valid JSON"},
		{"bad utf8", "{\"action\":\"\xff\"}", "UTF-8"},
		{"wrong type", `{"n":"7"}`, "not valid"},
		{"overflow", `{"n":99999999999999999999}`, "not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b body
			err := UnmarshalStrict([]byte(tc.body), &b)
			if _, ok := errors.AsType[*DecodeError](err); !ok || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a DecodeError containing %q", err, tc.want)
			}
		})
	}
}

func TestDecodeStrictAccepts(t *testing.T) {
	t.Parallel()
	var b body
	if err := UnmarshalStrict([]byte(` {"action":"ack","n":-12,"labels":{"A":"1","a":"2"},"in":{"model":"m"},"list":[{"model":"x"}],"raw":{"K":{"A":1,"a":2},"k":0}} `), &b); err != nil {
		t.Fatal(err)
	}
	// Map keys and a raw document's keys are data, not field names: "A"
	// and "a" are two.
	if b.Action != "ack" || b.N != -12 || len(b.Labels) != 2 || b.In.Model != "m" || len(b.List) != 1 || len(b.Raw) == 0 {
		t.Fatalf("decoded %+v", b)
	}
	if err := UnmarshalStrict([]byte(" \n"), &b); !errors.Is(err, ErrEmpty) {
		t.Fatalf("empty body: %v, want ErrEmpty", err)
	}
}

func TestDecodeStrictTooLarge(t *testing.T) {
	t.Parallel()
	var b body
	big := `{"action":"` + strings.Repeat("a", 100) + `"}`
	err := DecodeStrict(strings.NewReader(big), 64, &b)
	if te, ok := errors.AsType[*TooLargeError](err); !ok || te.Limit != 64 {
		t.Fatalf("err %v, want TooLargeError{64}", err)
	}
	if b.Action != "" {
		t.Fatalf("an oversize body was decoded: %q", b.Action)
	}
	if err := DecodeStrict(strings.NewReader(big), int64(len(big)), &b); err != nil {
		t.Fatalf("a body of exactly the limit: %v", err)
	}
}

// FuzzDecodeStrict: whatever the body, DecodeStrict returns without
// panicking, and what it accepts encoding/json decodes to the same value.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{`{"action":"ack"}`, `{"labels":{"a":"b"},"n":1}`, `{"list":[{"model":"x"}]}`, `{"action":"a","Action":"b"}`, `[]`, `1e999`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var strict, loose body
		if err := UnmarshalStrict(data, &strict); err != nil {
			return
		}
		if err := json.Unmarshal(data, &loose); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(strict, loose) {
			t.Fatalf("%q: strict %+v, encoding/json %+v", data, strict, loose)
		}
	})
}
