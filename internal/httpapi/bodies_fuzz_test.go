package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/semaq/semaq/semaq"
)

// FuzzJSONBodies: every JSON body the front door acts on (fetch, answer,
// cancel, durables, session rounds) is decoded without panicking; what is accepted reads
// the same to encoding/json, and what is refused is a 400 or 413 naming
// the body.
func FuzzJSONBodies(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"ack_subject":"$SQ.QA.Q.1.x","action":"ack","output_tokens":3}`,
		`{"action":"ack","Action":"term"}`, `{"name":"d","subject":"ai.x","deliver":"new","start_seq":4}`,
		`{"max":1,"labels":{"a":"b"}}`, `{"delay_ms":1e400}`, `[]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, mk := range []func() any{
			func() any { return new(httpFetch) },
			func() any { return new(httpAnswer) },
			func() any { return new(httpDurableBody) },
			func() any { return new(httpRoundAdd) },
			func() any { return new(struct{}) },
		} {
			v, loose := mk(), mk()
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			if !decodeBody(rec, r, "fuzz body", 1<<10, true, v) {
				if rec.Code != 400 && rec.Code != 413 || !bytes.Contains(rec.Body.Bytes(), []byte("fuzz body")) {
					t.Fatalf("%q into %T: %d %s", body, v, rec.Code, rec.Body)
				}
				continue
			}
			if len(bytes.TrimSpace(body)) == 0 {
				continue
			}
			if err := json.Unmarshal(body, loose); err != nil || !reflect.DeepEqual(v, loose) {
				t.Fatalf("%q into %T: strict %+v, encoding/json %+v (%v)", body, v, v, loose, err)
			}
		}
	})
}

// FuzzBatchBody: a batch body, NDJSON or a JSON array, is read without
// panicking; what is accepted is at most MaxBatchMsgs messages, each with a
// subject, that read the same when written back in the item form; what is
// refused says why.
func FuzzBatchBody(f *testing.F) {
	for _, s := range []string{``, "\n", `[]`, `null`, `{"subject":"ai.x"}`, `[{"subject":"ai.x"}]`,
		`{"subject":"ai.x","headers":{"A":"1","B":["2","3"]},"data":{"k":[1,2.5,null]}}` + "\n" + `{"subject":"ai.y","data_base64":"AAH/"}`,
		`{"subject":"ai.x","data":1,"data_base64":"AA=="}`, `{"subject":"ai.x","Subject":"y"}`, `{"subject":"ai.x","data":{"a":1,"a":2}}`,
		"{\"subject\":\"ai.\xff\"}", `[{"subject":"a"} {"subject":"b"}]`, `[{"subject":"a"}]]`, `{"subject":"a","headers":{"X":[]}}`,
		strings.Repeat(`{"subject":"a","data":`, 3) + "1}}}"} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, ndjson bool) {
		msgs, err := parseBatchBody(ndjson, body)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: an error without a message", body)
			}
			return
		}
		if len(msgs) > semaq.MaxBatchMsgs {
			t.Fatalf("%q: accepted %d messages", body, len(msgs))
		}
		for i, m := range msgs {
			if m.Subject == "" {
				t.Fatalf("%q: message %d has no subject", body, i)
			}
			item := map[string]any{"subject": m.Subject, "data_base64": base64.StdEncoding.EncodeToString(m.Data)}
			if m.Header != nil {
				item["headers"] = m.Header
			}
			b, err := json.Marshal(item)
			if err != nil {
				t.Fatalf("%q: message %d cannot be written back: %v", body, i, err)
			}
			again, err := parseBatchBody(true, b)
			if m.Data == nil {
				m.Data = []byte{} // written back as "", read as no bytes
			}
			if err != nil || len(again) != 1 || !reflect.DeepEqual(again[0], m) {
				t.Fatalf("%q: message %d %+v written back as %s reads %+v (%v)", body, i, m, b, again, err)
			}
		}
	})
}

// FuzzGuard: whatever Host, Origin and Sec-Fetch-Site say, the guard
// answers without panicking, a request a browser marks cross-site from an
// origin not allowed never passes, and neither does a foreign Host name.
func FuzzGuard(f *testing.F) {
	f.Add("localhost:8080", "http://evil.example", "cross-site", "POST", "text/plain")
	f.Add("evil.example", "", "", "GET", "")
	f.Add("[::1]:80", "null", "same-site", "DELETE", "application/json")
	f.Add("127.0.0.1", "http://127.0.0.1", "same-origin", "PUT", "application/json; charset=utf-8")
	h := New(Options{AllowedOrigins: []string{"https://ok.example"}, AllowedHosts: []string{"broker.example"}})
	f.Fuzz(func(t *testing.T, host, origin, site, method, ct string) {
		r, err := http.NewRequest(http.MethodGet, "http://localhost/api/v1/queues/Q/fetch", nil)
		if err != nil {
			t.Skip()
		}
		r.Method, r.Host = method, host
		r.Header.Set("Origin", origin)
		r.Header.Set("Sec-Fetch-Site", site)
		r.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		passed := h.guard(rec, r)
		if passed && (site == "cross-site" || site == "same-site") && !h.originAllowed(origin) {
			t.Fatalf("passed a %s request from %q", site, origin)
		}
		if passed && !h.hostAllowed(host) {
			t.Fatalf("passed Host %q", host)
		}
		if !passed && rec.Code != 403 && rec.Code != 415 && rec.Code != 204 {
			t.Fatalf("refusal with status %d", rec.Code)
		}
	})
}

// sessionBodySeeds are session documents and put bodies worth starting
// from: duplicates in one case and across cases, depth, trailing data,
// invalid UTF-8, and settings in and out of bounds.
var sessionBodySeeds = []string{``, `{}`, `[]`, `null`, `"x"`, `{"a":1,"a":2}`, `{"a":1,"A":2}`, `{"a":{"b":1,"b":2}}`,
	`{"a":[{"b":1},{"b":2}]}`, `{"a":1} {}`, `{"a":1}]`, "{\"a\":\"\xff\"}", `{"data":{"x":1}}`,
	`{"data":{},"settings":{"ttl":3600000000000,"depends":{"rag":"v1"}}}`, `{"data":{},"settings":{"TTL":1}}`,
	`{"data":{},"settings":null}`, `{"data":[]}`, `{"data":{},"data":{}}`, `{"settings":{}}`,
	strings.Repeat(`{"a":`, 65) + `1` + strings.Repeat(`}`, 65)}

// FuzzSessionBodies: the session endpoints' own parsing (checkDocument for
// data and merge patches, parseSessionPut) never panics; what it accepts
// is one JSON object encoding/json reads, without a key twice in any
// object; a put it accepts has object data and settings within bounds.
func FuzzSessionBodies(f *testing.F) {
	for _, s := range sessionBodySeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if err := checkDocument(body); err == nil {
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil || m == nil {
				t.Fatalf("accepted %q, which is not a JSON object to encoding/json: %v", body, err)
			}
			if hasDuplicateKey(t, body) {
				t.Fatalf("accepted %q, which has a key twice", body)
			}
		}
		data, set, err := parseSessionPut(body)
		if err != nil {
			return
		}
		if checkDocument(data) != nil {
			t.Fatalf("put %q: accepted data %q", body, data)
		}
		if set != nil {
			check := *set
			if err := semaq.CheckSessionSettings(&check); err != nil {
				t.Fatalf("put %q: accepted settings %+v: %v", body, set, err)
			}
		}
	})
}

// hasDuplicateKey reports whether any object in the valid JSON b has a
// key twice, by decoding it into ordered key lists.
func hasDuplicateKey(t *testing.T, b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	var walk func() bool
	walk = func() bool {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("re-reading %q: %v", b, err)
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return false
		}
		dup, seen := false, map[string]bool{}
		for dec.More() {
			if d == '{' {
				kt, _ := dec.Token()
				k := kt.(string)
				dup = dup || seen[k]
				seen[k] = true
			}
			dup = walk() || dup
		}
		_, _ = dec.Token()
		return dup
	}
	return walk()
}

func TestCheckDocument(t *testing.T) {
	for _, tc := range []struct {
		body, want string // want "" accepts
	}{
		{`{"a":{"b":[1,{"c":null}]},"A":true}`, ""},
		{`{"a":[{"b":1},{"b":2}]}`, ""},
		{`{"a":1,"a":2}`, `key "a" appears twice`},
		{`{"a":{"b":1,"c":{},"b":2}}`, `key "b" appears twice`},
		{`[{}]`, "a JSON array; want an object"},
		{`1`, "a JSON number; want an object"},
		{` `, "the body is empty"},
		{"{\"a\":\"\xff\"}", "not valid UTF-8"},
		{`{"a":1}x`, "data after the JSON object"},
		{`{"a":}`, "not valid JSON"},
		{strings.Repeat(`[`, 14) + strings.Repeat(`]`, 14), "a JSON array"},
		{`{"a":` + strings.Repeat(`[`, 14) + strings.Repeat(`]`, 14) + `}`, ""},
		{`{"a":` + strings.Repeat(`[`, 15) + strings.Repeat(`]`, 15) + `}`, "nested deeper than 15 levels"},
	} {
		err := checkDocument([]byte(tc.body))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%.40q: %v", tc.body, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%.40q: %v, want %q", tc.body, err, tc.want)
		}
	}
}
