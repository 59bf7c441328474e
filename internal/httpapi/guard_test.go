package httpapi_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/semaq/semaq/internal/httpapi"
)

// TestGuardRebinding: a Host that is not loopback, an IP literal or
// configured is refused on every route, the registry's and gateway's
// mounted ones included, and reaches no handler.
func TestGuardRebinding(t *testing.T) {
	t.Parallel()
	var mounted atomic.Int32
	e := setupWith(t, 64<<10, 0, func(o *httpapi.Options) {
		o.AllowedHosts = []string{"broker.internal", "pinned.internal:9999"}
		o.Routes = func(mux *http.ServeMux) {
			// Stand-ins for the registry's and the gateway's routes.
			for _, p := range []string{"PUT /config", "DELETE /subjects/{s}", "POST /v1/chat/completions"} {
				mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { mounted.Add(1) })
			}
		}
	})
	for _, tc := range []struct{ method, path, host string }{
		{"GET", "/api/v1/streams", "evil.example"},
		{"GET", "/api/v1/queues", "evil.example:8080"},
		{"GET", "/api/v1/tokens/req-1", "attacker.test"},
		{"DELETE", "/subjects/orders-value", "evil.example"},
		{"PUT", "/config", "rebind.evil.example:80"},
		{"POST", "/v1/chat/completions", "evil.example"},
		{"GET", "/healthz", "localhost.evil.example"},
		{"GET", "/healthz", "pinned.internal:8080"}, // configured for another port only
		{"GET", "/healthz", "127.0.0.1.nip.io"},
	} {
		r := e.doHost(t, tc.method, tc.path, tc.host, http.Header{"Content-Type": {"application/json"}}, []byte(`{}`))
		wantError(t, r, http.StatusForbidden, "DNS rebinding")
	}
	if n := mounted.Load(); n != 0 {
		t.Fatalf("%d refused requests reached a mounted handler", n)
	}
	for _, host := range []string{"localhost", "localhost:8080", "LOCALHOST.", "app.localhost:1", "127.0.0.1:9", "[::1]:80",
		"10.1.2.3:8080", "broker.internal", "Broker.Internal:8080", "pinned.internal:9999"} {
		if r := e.doHost(t, "GET", "/healthz", host, nil, nil); r.status != 200 {
			t.Errorf("Host %s: %d %s", host, r.status, r.body)
		}
	}
	r := e.doHost(t, "PUT", "/config", "localhost:1", http.Header{"Content-Type": {"application/json"}}, []byte(`{}`))
	if r.status != 200 || mounted.Load() != 1 {
		t.Fatalf("a mounted route from localhost: %d %s", r.status, r.body)
	}
	e.legit(t)
}

// TestGuardCrossOrigin: what a web page can make a browser send (a form
// POST, a no-cors fetch, an <img>) is refused; curl and same-origin pages
// are not.
func TestGuardCrossOrigin(t *testing.T) {
	t.Parallel()
	e := setupWith(t, 64<<10, 0, func(o *httpapi.Options) {
		o.AllowedOrigins = []string{"https://app.example.com"}
	})
	self := e.base // http://127.0.0.1:port
	textPlain := "text/plain;charset=UTF-8"
	for _, tc := range []struct {
		name, method, path string
		hdr                http.Header
		want               string
	}{
		{"form post", "POST", "/api/v1/publish/ai.x", http.Header{"Origin": {"http://evil.example"}, "Content-Type": {textPlain}}, "Origin"},
		{"form post urlencoded", "POST", "/api/v1/publish/ai.x", http.Header{"Origin": {"https://evil.example"}, "Content-Type": {"application/x-www-form-urlencoded"}}, "Origin"},
		{"null origin", "POST", "/api/v1/publish/ai.x", http.Header{"Origin": {"null"}}, "Origin"},
		{"other port of localhost", "POST", "/api/v1/publish/ai.x", http.Header{"Origin": {"http://127.0.0.1:1"}}, "Origin"},
		{"fetch metadata cross-site", "POST", "/api/v1/publish/ai.x", http.Header{"Sec-Fetch-Site": {"cross-site"}}, "cross-site"},
		{"fetch metadata same-site", "POST", "/api/v1/publish/ai.x", http.Header{"Sec-Fetch-Site": {"same-site"}, "Origin": {"http://localhost:3000"}}, "same-site"},
		{"no-cors cancel", "POST", "/api/v1/queues/Q/cancel/1", http.Header{"Sec-Fetch-Site": {"cross-site"}}, "cross-site"},
		{"no-cors fetch", "POST", "/api/v1/queues/Q/fetch", http.Header{"Origin": {"http://evil.example"}}, "Origin"},
		{"img durable", "GET", "/api/v1/subscribe/ai.x?durable=dash", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Dest": {"image"}}, "cross-site"},
		{"registry put", "PUT", "/config", http.Header{"Origin": {"http://evil.example"}, "Content-Type": {"application/json"}}, "Origin"},
		{"registry delete", "DELETE", "/subjects/x", http.Header{"Sec-Fetch-Site": {"cross-site"}}, "cross-site"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.do(t, tc.method, tc.path, tc.hdr, []byte("x")), http.StatusForbidden, tc.want)
		})
	}
	if n := e.streamState(t, "AI").Messages; n != 0 {
		t.Fatalf("refused publishes stored %d messages", n)
	}

	// Allowed: curl (no Origin), the server's own pages, a browser's
	// same-origin request, a configured origin (with CORS headers).
	for _, hdr := range []http.Header{
		nil,
		{"Content-Type": {"application/octet-stream"}},
		{"Origin": {self}},
		{"Origin": {self}, "Sec-Fetch-Site": {"same-origin"}},
		{"Sec-Fetch-Site": {"none"}},
		{"Origin": {"https://app.example.com"}, "Sec-Fetch-Site": {"cross-site"}},
	} {
		r := e.do(t, "POST", "/api/v1/publish/ai.x", hdr, []byte{0xff, 0x00, 0xfe})
		wantAck(t, r)
		if o := hdr.Get("Origin"); o == "https://app.example.com" && r.header.Get("Access-Control-Allow-Origin") != o {
			t.Errorf("allowed origin got no CORS header: %v", r.header)
		}
	}
	// A preflight from the allowed origin is granted, from another is not.
	pre := http.Header{"Origin": {"https://app.example.com"}, "Access-Control-Request-Method": {"POST"}, "Access-Control-Request-Headers": {"content-type"}}
	if r := e.do(t, "OPTIONS", "/api/v1/queues/Q/fetch", pre, nil); r.status != 204 || r.header.Get("Access-Control-Allow-Headers") != "content-type" {
		t.Fatalf("allowed preflight: %d %v", r.status, r.header)
	}
	pre.Set("Origin", "https://evil.example")
	if r := e.do(t, "OPTIONS", "/api/v1/queues/Q/fetch", pre, nil); r.status == 204 || r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight from another origin: %d %v", r.status, r.header)
	}
	e.legit(t)
}

// TestGuardContentType: the JSON endpoints refuse a body a page could send
// without a preflight; publish takes any body.
func TestGuardContentType(t *testing.T) {
	t.Parallel()
	e := setupWith(t, 64<<10, 0, nil)
	for _, tc := range []struct{ path, ct string }{
		{"/api/v1/queues/Q/cancel/1", ""},
		{"/api/v1/queues/Q/cancel/1", "text/plain"},
		{"/api/v1/queues/Q/fetch", "application/x-www-form-urlencoded"},
		{"/api/v1/queues/Q/answer", "multipart/form-data; boundary=x"},
		{"/api/v1/queues/Q/answer", "application/json; charset=latin1"},
		{"/api/v1/durables", "text/plain;charset=UTF-8"},
		{"/api/v1/durables", "application/jsonx"},
	} {
		var hdr http.Header
		if tc.ct != "" {
			hdr = http.Header{"Content-Type": {tc.ct}}
		}
		r := e.do(t, "POST", tc.path, hdr, []byte(`{"ack_subject":"x","action":"term"}`))
		wantError(t, r, http.StatusUnsupportedMediaType, "application/json")
	}
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "application/vnd.semaq+json"} {
		r := e.do(t, "POST", "/api/v1/queues/NOPE/fetch", http.Header{"Content-Type": {ct}}, nil)
		if r.status != 404 || !strings.Contains(string(r.body), "NOPE") {
			t.Errorf("Content-Type %s: %d %s", ct, r.status, r.body)
		}
	}
	// An unknown path stays 404, not 415.
	wantError(t, e.do(t, "POST", "/api/v1/nothing", nil, nil), http.StatusNotFound, "no such endpoint")
	e.legit(t)
}
