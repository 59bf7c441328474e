package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/httpapi"
	"github.com/semaq/semaq/semaq"
)

// TestStrictBodies: a JSON body two parsers could read differently, a
// number too long to parse, or a body over its limit is refused, never
// truncated or guessed at.
func TestStrictBodies(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if _, err := e.c.AddQueue(context.Background(), semaq.QueueConfig{Name: "Q", Subjects: []string{"q.>"}}); err != nil {
		t.Fatal(err)
	}
	ack := `"ack_subject":"$SQ.QA.Q.1.x"`
	for _, tc := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/api/v1/queues/Q/answer", `{` + ack + `,"action":"ack","action":"term"}`, 400, `key "action" appears twice`},
		{"/api/v1/queues/Q/answer", `{` + ack + `,"action":"ack","Action":"term"}`, 400, "differ only in case"},
		{"/api/v1/queues/Q/answer", `{` + ack + `,"ACTION":"term"}`, 400, "case-sensitive"},
		{"/api/v1/queues/Q/answer", `{` + ack + `,"action":"nak","delay_ms":` + strings.Repeat("9", 1000) + `}`, 400, "number literal is 1000 characters"},
		{"/api/v1/queues/Q/answer", `{` + ack + `,"action":"term","reason":"` + strings.Repeat("r", 17<<10) + `"}`, 413, "limit of 16384 bytes"},
		{"/api/v1/queues/Q/answer", ``, 400, "body is empty"},
		{"/api/v1/queues/Q/answer", `{"ack_subject":"$SQ.QA.Q.>","action":"ack"}`, 400, "wildcard"},
		{"/api/v1/queues/Q/fetch", `{"max":1,"max":1024}`, 400, "appears twice"},
		{"/api/v1/queues/Q/fetch", `{"labels":{"model":"a","model":"b"}}`, 400, "appears twice"},
		{"/api/v1/queues/Q/fetch", `{"wait_ms":9223372036854775}`, 400, "wait_ms"},
		{"/api/v1/queues/Q/fetch", `{"worker":"` + strings.Repeat("w", 70<<10) + `"}`, 413, "limit of 65536 bytes"},
		{"/api/v1/queues/Q/fetch", `{"max":1e2}`, 400, "not valid"},
		{"/api/v1/queues/Q/cancel/1", `not json`, 400, "not valid JSON"},
		{"/api/v1/queues/Q/cancel/1", `{"id":"2"}`, 400, "unknown key"},
	} {
		r := e.do(t, http.MethodPost, tc.path, jsonHdr(), []byte(tc.body))
		body := tc.body
		if len(body) > 80 {
			body = body[:80]
		}
		if r.status != tc.status || !strings.Contains(string(r.body), strings.ReplaceAll(tc.want, `"`, `\"`)) {
			t.Errorf("%s %s: %d %.300s, want %d naming %s", tc.path, body, r.status, r.body, tc.status, tc.want)
		}
	}
	// Still serving: a fetch with a proper body.
	if r := e.do(t, http.MethodPost, "/api/v1/queues/Q/fetch", jsonHdr(), []byte(`{"max":2}`)); r.status != 200 {
		t.Fatalf("fetch after the hostile bodies: %d %s", r.status, r.body)
	}
	e.legit(t)
}

// TestSubjectsRefused: every path that takes a subject refuses invalid
// UTF-8, wildcards where a literal is needed, empty tokens and the
// reserved namespaces.
func TestSubjectsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/api/v1/publish/ai.%FF%FE", "UTF-8"},
		{"POST", "/api/v1/publish/ai.%C0%AF", "UTF-8"},
		{"POST", "/api/v1/publish/ai.*", "wildcard"},
		{"POST", "/api/v1/publish/ai.%3E", "wildcard"},
		{"POST", "/api/v1/publish/ai..x", "empty token"},
		{"POST", "/api/v1/publish/ai.x.", "empty token"},
		{"POST", "/api/v1/publish/%2Eai", "empty token"},
		{"POST", "/api/v1/publish/ai.a%20b", "space"},
		{"POST", "/api/v1/publish/$SQ.API.STREAM.DELETE.AI", "reserved"},
		{"POST", "/api/v1/publish/_INBOX.x", "reserved"},
		{"GET", "/api/v1/subscribe/ai.%FF", "UTF-8"},
		{"GET", "/api/v1/subscribe/ai..x", "empty token"},
		{"GET", "/api/v1/subscribe/ai.%3E.x", "before its last token"},
		{"GET", "/api/v1/subscribe/$JS.API.%3E", "reserved"},
	} {
		wantError(t, e.do(t, tc.method, tc.path, nil, []byte("x")), http.StatusBadRequest, tc.want)
	}
	for _, body := range []string{"{\"name\":\"d\",\"subject\":\"ai.\xff\"}", `{"name":"d","subject":"ai..x"}`, `{"name":"d","subject":"$SQ.>"}`} {
		r := e.do(t, "POST", "/api/v1/durables", jsonHdr(), []byte(body))
		if r.status != 400 {
			t.Errorf("durable %s: %d %s", body, r.status, r.body)
		}
	}
	if n := e.streamState(t, "AI").Messages; n != 0 {
		t.Fatalf("%d messages stored", n)
	}
	e.legit(t)
}

// TestReservedHeadersRefused: a status line or the broker's own headers
// sent as custom headers are refused, nothing stored.
func TestReservedHeadersRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, name := range []string{"Status", "Description", "Nats-Subject", "Nats-Sequence", "Nats-Stream",
		"Nats-Time-Stamp", "Nats-Last-Sequence", "KV-Operation", "Nats-Rollup", "nats-marker-reason", "Nats-Header-X"} {
		r := e.do(t, http.MethodPost, "/api/v1/publish/ai.x", http.Header{"Nats-Header-" + name: {"409"}}, []byte("x"))
		wantError(t, r, http.StatusBadRequest, "reserved header")
	}
	if n := e.streamState(t, "AI").Messages; n != 0 {
		t.Fatalf("%d messages stored", n)
	}
	e.legit(t)
}

// TestPublishClientMistakesAre4xx: what only the sender can fix is a 4xx,
// whatever layer found it.
func TestPublishClientMistakesAre4xx(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tc := range []struct {
		hdr  http.Header
		want string
	}{
		{http.Header{"Traceparent": {"00-zzzz-01"}}, "traceparent"},
		{http.Header{"Ai-Tenant": {strings.Repeat("t", 400)}}, "AI-Tenant"},
		{http.Header{"Nats-Expected-Last-Sequence": {"99"}}, "wrong last sequence"},
		{http.Header{"Nats-Expected-Stream": {"NOPE"}}, "expected stream"},
		{http.Header{"Nats-Expected-Last-Sequence": {"1" + strings.Repeat("0", 40)}}, "Nats-Expected-Last-Sequence"},
	} {
		r := e.do(t, http.MethodPost, "/api/v1/publish/ai.x", tc.hdr, []byte("x"))
		if r.status < 400 || r.status > 499 || !strings.Contains(string(r.body), tc.want) {
			t.Errorf("%v: %d %s, want a 4xx naming %s", tc.hdr, r.status, r.body, tc.want)
		}
	}
	e.legit(t)
}

// TestPublishUnknownOutcome: a publish whose acknowledgement does not come
// is 504 "unknown" with the message id, and a retry with that id stores
// the message once.
func TestPublishUnknownOutcome(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A front door whose broker calls give up at once.
	hurried, err := client.Connect(ctx, srv.ClientURL(), client.WithTimeout(time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hurried.Close)
	slow := serveWith(t, hurried, 64<<10, 0, nil)
	normal := serveWith(t, c, 64<<10, 0, nil)

	for _, hdr := range []http.Header{nil, {"Nats-Msg-Id": {"order-7"}}} {
		r := slow.do(t, http.MethodPost, "/api/v1/publish/ai.orders", hdr, []byte("pay"))
		var out struct {
			Error   struct{ Code int }
			Outcome string `json:"outcome"`
			MsgID   string `json:"msg_id"`
		}
		if r.status != http.StatusGatewayTimeout || json.Unmarshal(r.body, &out) != nil || out.Outcome != "unknown" ||
			out.MsgID == "" || out.Error.Code != 504 || r.header.Get("Nats-Msg-Id") != out.MsgID {
			t.Fatalf("publish without an ack: %d %v %s", r.status, r.header, r.body)
		}
		if id := hdr.Get("Nats-Msg-Id"); id != "" && out.MsgID != id {
			t.Fatalf("msg_id %q, want the client's %q", out.MsgID, id)
		}
		// The retry, with the id: stored once, however the first one ended.
		before := normal.streamState(t, "AI").Messages
		a := wantAck(t, normal.do(t, http.MethodPost, "/api/v1/publish/ai.orders", http.Header{"Nats-Msg-Id": {out.MsgID}}, []byte("pay")))
		again := wantAck(t, normal.do(t, http.MethodPost, "/api/v1/publish/ai.orders", http.Header{"Nats-Msg-Id": {out.MsgID}}, []byte("pay")))
		if !again.Duplicate || again.Seq != a.Seq {
			t.Fatalf("second retry not deduplicated: %+v %+v", a, again)
		}
		if n := normal.streamState(t, "AI").Messages; n-before > 1 {
			t.Fatalf("%d copies stored", n-before)
		}
	}
	// A successful publish names its id too (generated when not given).
	r := normal.do(t, http.MethodPost, "/api/v1/publish/ai.orders", nil, []byte("x"))
	wantAck(t, r)
	if !strings.HasPrefix(r.header.Get("Nats-Msg-Id"), "http-") {
		t.Fatalf("no generated Nats-Msg-Id: %v", r.header)
	}
}

// TestInferKeys: with gateway keys configured, the gateway's subjects take
// a publish only with a key, and the tenant is the key's.
func TestInferKeys(t *testing.T) {
	t.Parallel()
	e := setupWith(t, 64<<10, 0, func(o *httpapi.Options) {
		o.InferKeys = map[string]string{"key-a": "tenant-a", "key-b": "tenant-b"}
	})
	for _, auth := range []string{"", "Bearer", "Bearer nope", "Basic a2V5LWE6", "Bearer key-a-but-longer", "bearer  key-a"} {
		hdr := http.Header{"Ai-Tenant": {"spoofed"}}
		if auth != "" {
			hdr.Set("Authorization", auth)
		}
		r := e.do(t, http.MethodPost, "/api/v1/publish/ai.infer.llama3", hdr, []byte(`{}`))
		wantError(t, r, http.StatusUnauthorized, "API key")
		if r.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%q: no WWW-Authenticate", auth)
		}
	}
	if n := e.streamState(t, "AI").Messages; n != 0 {
		t.Fatalf("%d unauthorised publishes stored", n)
	}
	for _, hdr := range []http.Header{
		{"Authorization": {"Bearer key-b"}, "Ai-Tenant": {"spoofed"}},
		{"Authorization": {"Bearer key-b"}, "Nats-Header-Ai-Tenant": {"spoofed"}},
		{"Authorization": {"Bearer key-b"}},
	} {
		a := wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.infer.llama3", hdr, []byte(`{}`)))
		ev := e.subscribe(t, "/api/v1/subscribe/ai.infer.llama3?count=1&start_seq="+itoa(a.Seq), nil)
		var m struct{ Headers map[string]string }
		if len(ev) != 1 || json.Unmarshal([]byte(ev[0].data), &m) != nil || m.Headers["AI-Tenant"] != "tenant-b" {
			t.Fatalf("%v: stored %+v", hdr, ev)
		}
	}
	// Other subjects need no key.
	wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.inference", nil, []byte(`{}`)))
	e.legit(t)
}
