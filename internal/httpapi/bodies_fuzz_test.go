package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// FuzzJSONBodies: every JSON body the front door acts on (fetch, answer,
// cancel, durables) is decoded without panicking; what is accepted reads
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
