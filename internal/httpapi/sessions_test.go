package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/httpapi"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/semaq"
)

func hdr(kv ...string) http.Header {
	h := http.Header{"Content-Type": {"application/json"}}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// wantInfo checks a write's answer: status, the session's metadata at rev,
// and the same revision as the ETag.
func wantInfo(t *testing.T, r response, status int, rev uint64) semaq.SessionInfo {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	var info semaq.SessionInfo
	if err := json.Unmarshal(r.body, &info); err != nil {
		t.Fatalf("answer %s: %v", r.body, err)
	}
	if info.Revision != rev {
		t.Errorf("revision %d, want %d: %s", info.Revision, rev, r.body)
	}
	if etag := r.header.Get("ETag"); etag != `"`+itoa(rev)+`"` {
		t.Errorf("ETag %q, want %q", etag, `"`+itoa(rev)+`"`)
	}
	return info
}

func TestHTTPSessionFlow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const p = "/api/v1/sessions/chat-1"
	info := wantInfo(t, e.do(t, "PUT", p, hdr("If-Match", "0"),
		[]byte(`{"data":{"user":"ada","lang":"en"},"settings":{"ttl":3600000000000,"depends":{"rag":"v1"}}}`)), http.StatusCreated, 1)
	if info.Settings.TTL != time.Hour || info.Settings.Depends["rag"] != "v1" || info.State != semaq.SessionActive {
		t.Errorf("put: %+v", info)
	}
	// If-Match takes the ETag as sent, or a bare number; a stale one is
	// 409 naming the session's revision.
	wantInfo(t, e.do(t, "PUT", p, hdr("If-Match", `"1"`), []byte(`{"data":{"user":"ada"}}`)), http.StatusOK, 2)
	wantError(t, e.do(t, "PUT", p, hdr("If-Match", "1"), []byte(`{"data":{}}`)), http.StatusConflict, "is at revision 2")
	wantError(t, e.do(t, "PUT", p, hdr("If-Match", "0"), []byte(`{"data":{}}`)), http.StatusConflict, "revision 2")
	wantError(t, e.do(t, "PUT", p, hdr("If-Match", `W/"2"`), []byte(`{"data":{}}`)), http.StatusPreconditionFailed, `If-Match "W/\"2\"" is not a revision number`)

	r := e.do(t, "GET", p, nil, nil)
	var s semaq.Session
	if r.status != 200 || json.Unmarshal(r.body, &s) != nil || string(s.Data) != `{"user":"ada"}` || r.header.Get("ETag") != `"2"` {
		t.Fatalf("get: %d %v %s", r.status, r.header, r.body)
	}

	patch := http.Header{"Content-Type": {"application/merge-patch+json"}, "If-Match": {`"2"`}}
	wantInfo(t, e.do(t, "PATCH", p, patch, []byte(`{"topic":"billing","n":2}`)), http.StatusOK, 3)
	wantError(t, e.do(t, "PATCH", p, patch, []byte(`{"x":1}`)), http.StatusConflict, "is at revision 3")
	wantError(t, e.do(t, "PATCH", p, http.Header{"Content-Type": {"application/problem+json"}}, []byte(`{}`)), http.StatusUnsupportedMediaType, "not a merge patch")
	wantError(t, e.do(t, "PATCH", "/api/v1/sessions/nope", hdr(), []byte(`{}`)), http.StatusNotFound, "session nope not found")
	wantInfo(t, e.do(t, "PATCH", "/api/v1/sessions/nope?create=true", hdr(), []byte(`{"made":true}`)), http.StatusOK, 1)

	wantInfo(t, e.do(t, "POST", p+"/rounds", hdr(), []byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}],"tokens":5}`)), http.StatusOK, 4)
	info = wantInfo(t, e.do(t, "POST", p+"/rounds", hdr("If-Match", "4"), []byte(`{"messages":[{"role":"user","content":"bye"}]}`)), http.StatusOK, 5)
	if info.RoundCount != 2 || info.LastRound != 2 {
		t.Errorf("after two rounds: %+v", info)
	}
	r = e.do(t, "GET", p+"/rounds?last=1", nil, nil)
	var rounds semaq.SessionRoundsResponse
	if r.status != 200 || json.Unmarshal(r.body, &rounds) != nil || rounds.Revision != 5 || len(rounds.Rounds) != 1 || rounds.Rounds[0].Messages[0].Content != "bye" {
		t.Fatalf("rounds?last=1: %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", p+"?rounds=-1", nil, nil)
	if r.status != 200 || json.Unmarshal(r.body, &s) != nil || len(s.Rounds) != 2 || string(s.Data) != `{"n":2,"topic":"billing","user":"ada"}` {
		t.Fatalf("get ?rounds=-1: %d %s", r.status, r.body)
	}

	// A moved dependency degrades it; a report does not change the
	// revision; a trim is a content change and makes it active again.
	if err := e.moveDependency("rag", "v2"); err != nil {
		t.Fatal(err)
	}
	info = wantInfo(t, e.do(t, "POST", p+"/report", hdr(), []byte(`{"confidence":0.1}`)), http.StatusOK, 5)
	if info.State != semaq.SessionDegraded || info.LowStreak != 1 {
		t.Errorf("report on a degraded session: %+v", info)
	}
	r = e.do(t, "GET", "/api/v1/sessions?state=degraded", nil, nil)
	var list semaq.SessionListResponse
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Sessions) != 1 || list.Sessions[0].ID != "chat-1" {
		t.Fatalf("list ?state=degraded: %d %s", r.status, r.body)
	}
	info = wantInfo(t, e.do(t, "POST", p+"/trim", hdr(), []byte(`{"before_round":2}`)), http.StatusOK, 6)
	if info.State != semaq.SessionActive || info.RoundCount != 1 || info.FirstRound != 2 {
		t.Errorf("trim: %+v", info)
	}
	r = e.do(t, "GET", "/api/v1/sessions?limit=1", nil, nil)
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Sessions) != 1 || list.Sessions[0].ID != "chat-1" || !list.More {
		t.Fatalf("list ?limit=1: %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/api/v1/sessions?after=chat-1", nil, nil)
	list = semaq.SessionListResponse{}
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Sessions) != 1 || list.Sessions[0].ID != "nope" || list.More {
		t.Fatalf("list ?after=chat-1: %d %s", r.status, r.body)
	}

	if r := e.do(t, "DELETE", p, hdr(), nil); r.status != 200 || strings.TrimSpace(string(r.body)) != `{"deleted":true}` {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	wantError(t, e.do(t, "GET", p, nil, nil), http.StatusNotFound, "session chat-1 not found")
	wantError(t, e.do(t, "DELETE", p, hdr(), nil), http.StatusNotFound, "session chat-1 not found")
}

func (e *env) moveDependency(name, version string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.c.MoveSessionDependency(ctx, semaq.SessionDependencyRequest{Name: name, Version: version})
	return err
}

// Sessions of two tenants with one ID are two sessions.
func TestHTTPSessionTenant(t *testing.T) {
	t.Parallel()
	e := setup(t)
	wantInfo(t, e.do(t, "PUT", "/api/v1/sessions/s?tenant=acme", hdr(), []byte(`{"data":{"t":"acme"}}`)), http.StatusCreated, 1)
	wantError(t, e.do(t, "GET", "/api/v1/sessions/s", nil, nil), http.StatusNotFound, "not found")
	r := e.do(t, "GET", "/api/v1/sessions/s?tenant=acme", nil, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"tenant":"acme"`) {
		t.Fatalf("get ?tenant=acme: %d %s", r.status, r.body)
	}
}

func TestHTTPSessionBadRequests(t *testing.T) {
	t.Parallel()
	e := setup(t)
	wantInfo(t, e.do(t, "PUT", "/api/v1/sessions/s1", hdr(), []byte(`{"data":{}}`)), http.StatusCreated, 1)
	big := `{"data":{"x":"` + strings.Repeat("y", semaq.MaxSessionBytes+16<<10) + `"}}`
	for _, tc := range []struct {
		method, path string
		h            http.Header
		body         string
		status       int
		want         string
	}{
		{"GET", "/api/v1/sessions/a.b", nil, "", 400, `session id "a.b" has '.'`},
		{"GET", "/api/v1/sessions/s1?round=1", nil, "", 400, `unknown query parameter "round" (want rounds, tenant)`},
		{"GET", "/api/v1/sessions/s1?rounds=1&rounds=2", nil, "", 400, "rounds is given 2 times"},
		{"GET", "/api/v1/sessions/s1?rounds=-2", nil, "", 400, "rounds=-2 is outside -1"},
		{"GET", "/api/v1/sessions?state=expired", nil, "", 400, `state="expired": want active, stale or degraded`},
		{"GET", "/api/v1/sessions?limit=0", nil, "", 400, "limit=0 is outside 1 to 1000"},
		{"GET", "/api/v1/sessions?tenant=a.b", nil, "", 400, "tenant"},
		{"GET", "/api/v1/sessions/s1/rounds?last=1&round=1", nil, "", 400, "not both"},
		{"PUT", "/api/v1/sessions/s1", hdr(), `{"data":[1]}`, 400, "data: a JSON array; want an object"},
		{"PUT", "/api/v1/sessions/s1", hdr(), `{"settings":{}}`, 400, `no "data"`},
		{"PUT", "/api/v1/sessions/s1", hdr(), `{"Data":{}}`, 400, `unknown key "Data"`},
		{"PUT", "/api/v1/sessions/s1", hdr(), `{"data":{"a":1,"a":2}}`, 400, `key "a" appears twice`},
		{"PUT", "/api/v1/sessions/s1", hdr(), `{"data":{},"data":{}}`, 400, `key "data" appears twice`},
		{"PUT", "/api/v1/sessions/s1", hdr(), `{"data":{}} {}`, 400, "data after the JSON object"},
		{"PUT", "/api/v1/sessions/s1", hdr(), `{"data":` + strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70) + `}`, 400, "nested deeper than 15"},
		{"PUT", "/api/v1/sessions/s1", hdr(), `{"data":{},"settings":{"TTL":1}}`, 400, `must be spelled "ttl"`},
		{"PUT", "/api/v1/sessions/s1", hdr(), `{"data":{},"settings":{"ttl":1000}}`, 400, "settings: ttl 1µs is outside 1s"},
		{"PUT", "/api/v1/sessions/s1", hdr(), big, 413, "larger than the limit"},
		{"PUT", "/api/v1/sessions/s1", hdr("If-Match", "*"), `{"data":{}}`, 412, `If-Match "*" is not a revision number`},
		{"PUT", "/api/v1/sessions/s1", hdr("If-Match", "1, 2"), `{"data":{}}`, 412, "not a revision number"},
		{"PATCH", "/api/v1/sessions/s1", hdr(), `null`, 400, "a JSON null; want an object"},
		{"PATCH", "/api/v1/sessions/s1?create=maybe", hdr(), `{}`, 400, `create="maybe": want true or false`},
		{"POST", "/api/v1/sessions/s1/rounds", hdr(), `{"messages":[]}`, 400, "no messages"},
		{"POST", "/api/v1/sessions/s1/rounds", hdr(), `{"messages":[{"role":"","content":"x"}]}`, 400, "role must be 1 to 32 characters"},
		{"POST", "/api/v1/sessions/s1/rounds", hdr("If-Match", "1"), `{"messages":[{"role":"user","content":"x"}],"revision":2}`, 400, "give one"},
		{"POST", "/api/v1/sessions/s1/rounds", hdr(), `{"messages":[{"role":"user","content":"x","name":"n"}]}`, 400, `unknown key "name"`},
		{"POST", "/api/v1/sessions/s1/trim", hdr(), `{"before_round":0}`, 400, "before_round 0"},
		{"POST", "/api/v1/sessions/s1/report", hdr(), `{}`, 400, `no "confidence"`},
		{"POST", "/api/v1/sessions/s1/report", hdr(), `{"confidence":1.5}`, 400, "confidence 1.5 is outside 0 to 1"},
		{"POST", "/api/v1/sessions/s1/report", nil, `{"confidence":0.5}`, 415, "Content-Type"},
		{"GET", "/api/v1/sessions/s1/watch?from_revision=0", nil, "", 400, "from_revision=\"0\": want a revision from 1"},
		{"GET", "/api/v1/sessions/s1/watch?from_revision=5", nil, "", 400, "revision 4 is past the session's 1"},
		{"GET", "/api/v1/sessions/s1/watch", http.Header{"Last-Event-Id": {"x"}}, "", 400, `Last-Event-ID "x" is not a revision`},
		{"GET", "/api/v1/sessions/none/watch", nil, "", 404, "session none not found"},
		{"POST", "/api/v1/sessions/s1", hdr(), `{}`, 405, "use GET or HEAD or PUT or PATCH or DELETE"},
	} {
		t.Run(tc.method+" "+tc.path+" "+tc.want, func(t *testing.T) {
			wantError(t, e.do(t, tc.method, tc.path, tc.h, []byte(tc.body)), tc.status, tc.want)
		})
	}
	// Nothing of that changed the session.
	r := e.do(t, "GET", "/api/v1/sessions/s1", nil, nil)
	if r.status != 200 || r.header.Get("ETag") != `"1"` || !strings.Contains(string(r.body), `"data":{}`) {
		t.Errorf("after the refusals: %d %v %s", r.status, r.header.Get("ETag"), r.body)
	}
}

// watchEvents opens a session's watch and returns its events as they come.
func (e *env) watchEvents(t *testing.T, path string, h http.Header) <-chan sse.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+path, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	ch := make(chan sse.Event, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		r := sse.NewReader(resp.Body, 0)
		for {
			ev, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && ctx.Err() == nil {
					ch <- sse.Event{Type: "read error", Data: err.Error()}
				}
				return
			}
			ch <- ev
		}
	}()
	return ch
}

// nextEvent waits for the next event; ok is false when the stream ended.
func nextEvent(t *testing.T, ch <-chan sse.Event) (sse.Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		return ev, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return sse.Event{}, false
}

// wantDelta reads the next event, which must be the delta of rev.
func wantDelta(t *testing.T, ch <-chan sse.Event, rev uint64, op string) semaq.SessionDelta {
	t.Helper()
	ev, ok := nextEvent(t, ch)
	if !ok {
		t.Fatalf("the stream ended before revision %d", rev)
	}
	var d semaq.SessionDelta
	if ev.Type != "delta" || ev.ID != itoa(rev) || json.Unmarshal([]byte(ev.Data), &d) != nil || d.Revision != rev || d.Op != op {
		t.Fatalf("event %+v, want the %s delta of revision %d", ev, op, rev)
	}
	return d
}

// A watch streams the kept deltas from a revision, then the live ones; a
// reconnect with Last-Event-ID resumes after it, whatever from_revision
// says; the stream ends with "end" when the session is deleted.
func TestHTTPSessionWatchResumes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const p = "/api/v1/sessions/w"
	wantInfo(t, e.do(t, "PUT", p, hdr(), []byte(`{"data":{"n":1}}`)), http.StatusCreated, 1)
	wantInfo(t, e.do(t, "PATCH", p, hdr(), []byte(`{"n":2}`)), http.StatusOK, 2)

	first := e.watchEvents(t, p+"/watch?from_revision=1", nil)
	if d := wantDelta(t, first, 1, semaq.SessionOpPut); string(d.Data) != `{"n":1}` {
		t.Errorf("put delta data %s", d.Data)
	}
	wantDelta(t, first, 2, semaq.SessionOpPatch)
	wantInfo(t, e.do(t, "POST", p+"/rounds", hdr(), []byte(`{"messages":[{"role":"user","content":"hi"}]}`)), http.StatusOK, 3)
	if d := wantDelta(t, first, 3, semaq.SessionOpRound); d.Round == nil || d.Round.Messages[0].Content != "hi" {
		t.Errorf("round delta %+v", d)
	}

	// Without from_revision, only what changes from now on.
	live := e.watchEvents(t, p+"/watch", nil)
	wantInfo(t, e.do(t, "PATCH", p, hdr(), []byte(`{"n":4}`)), http.StatusOK, 4)
	wantInfo(t, e.do(t, "POST", p+"/trim", hdr(), []byte(`{"before_round":2}`)), http.StatusOK, 5)
	wantDelta(t, live, 4, semaq.SessionOpPatch)
	if d := wantDelta(t, live, 5, semaq.SessionOpTrim); d.BeforeRound != 2 {
		t.Errorf("trim delta %+v", d)
	}

	resumed := e.watchEvents(t, p+"/watch?from_revision=1", http.Header{"Last-Event-Id": {"3"}})
	wantDelta(t, resumed, 4, semaq.SessionOpPatch)
	wantDelta(t, resumed, 5, semaq.SessionOpTrim)

	if r := e.do(t, "DELETE", p, hdr(), nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	for name, ch := range map[string]<-chan sse.Event{"first": first, "live": live, "resumed": resumed} {
		if name == "first" {
			wantDelta(t, ch, 4, semaq.SessionOpPatch)
			wantDelta(t, ch, 5, semaq.SessionOpTrim)
		}
		ev, ok := nextEvent(t, ch)
		if !ok || ev.Type != "end" || !strings.Contains(ev.Data, `"revision":5`) || !strings.Contains(ev.Data, "deleted or expired") {
			t.Errorf("%s: after the delete %+v (open %v), want the end event", name, ev, ok)
		}
		if ev, ok := nextEvent(t, ch); ok {
			t.Errorf("%s: an event after the end: %+v", name, ev)
		}
	}
}

// With --auth each call acts with the key's rights: a reader reads and
// does not write, a user reaches its own tenant's sessions only, and an
// admin names the tenant.
func TestHTTPSessionAuth(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	pub, read, admin := e.keys[semaq.RolePublisher], e.keys[semaq.RoleReader], e.keys[semaq.RoleAdmin]
	const js = "application/json"
	for _, tc := range []struct {
		name, method, path, key, body string
		want                          int
		says                          string
	}{
		{"admin writes another tenant's", "PUT", "/api/v1/sessions/g1?tenant=globex", admin, `{"data":{"t":"globex"}}`, 201, `"tenant":"globex"`},
		{"publisher writes in its tenant", "PUT", "/api/v1/sessions/a1", pub, `{"data":{"t":"acme"}}`, 201, `"tenant":"acme"`},
		{"reader reads its tenant's", "GET", "/api/v1/sessions/a1", read, "", 200, `"data":{"t":"acme"}`},
		{"reader lists its tenant's", "GET", "/api/v1/sessions", read, "", 200, `"id":"a1"`},
		{"reader may not write", "PATCH", "/api/v1/sessions/a1", read, `{"x":1}`, 403, "role reader"},
		{"reader may not add rounds", "POST", "/api/v1/sessions/a1/rounds", read, `{"messages":[{"role":"user","content":"x"}]}`, 403, "role reader"},
		{"another tenant's is not found", "GET", "/api/v1/sessions/g1", pub, "", 404, "session g1 not found"},
		{"a user names no other tenant", "GET", "/api/v1/sessions/g1?tenant=globex", pub, "", 403, "its own tenant only"},
		{"admin reads it", "GET", "/api/v1/sessions/g1?tenant=globex", admin, "", 200, `"data":{"t":"globex"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := ""
			if tc.method != "GET" {
				ct = js
			}
			a := e.call(t, tc.method, tc.path, tc.key, ct, tc.body)
			if a.status != tc.want || !strings.Contains(a.body, tc.says) {
				t.Fatalf("%s %s: %d %s, want %d saying %q", tc.method, tc.path, a.status, a.body, tc.want, tc.says)
			}
		})
	}
	// The listing of acme's reader holds acme's session only.
	if a := e.call(t, "GET", "/api/v1/sessions", read, "", ""); strings.Contains(a.body, "g1") {
		t.Errorf("acme's reader lists globex's session: %s", a.body)
	}
}

// A watch holds one of the event-stream slots while it runs: at the cap
// another is 503 with Retry-After, and once it ends the slot is free.
func TestHTTPSessionWatchBounded(t *testing.T) {
	t.Parallel()
	e := setupWith(t, maxPayload, 64, func(o *httpapi.Options) { o.MaxStreams = 1 })
	wantInfo(t, e.do(t, "PUT", "/api/v1/sessions/b", hdr(), []byte(`{"data":{}}`)), http.StatusCreated, 1)
	first := e.watchEvents(t, "/api/v1/sessions/b/watch?from_revision=1", nil)
	wantDelta(t, first, 1, semaq.SessionOpPut)
	r := e.do(t, "GET", "/api/v1/sessions/b/watch", nil, nil)
	wantError(t, r, http.StatusServiceUnavailable, "too many event streams")
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if r := e.do(t, "DELETE", "/api/v1/sessions/b", hdr(), nil); r.status != 200 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if ev, ok := nextEvent(t, first); !ok || ev.Type != "end" {
		t.Fatalf("after the delete: %+v %v", ev, ok)
	}
	if _, ok := nextEvent(t, first); ok {
		t.Fatal("the stream goes on after its end event")
	}
	wantInfo(t, e.do(t, "PUT", "/api/v1/sessions/b", hdr(), []byte(`{"data":{}}`)), http.StatusCreated, 1)
	// The slot goes back when the handler returns, just after the end
	// event: a new watch gets it.
	waitFor(t, "the slot to be free", func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/api/v1/sessions/b/watch", nil)
		resp, err := e.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
