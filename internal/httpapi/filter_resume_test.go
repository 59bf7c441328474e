package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestSubscribeFilterLastEventID: an EventSource reconnecting to a filtered
// stream with Last-Event-ID resumes after that message, with the filter,
// whatever start_seq says.
func TestSubscribeFilterLastEventID(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for i := range 10 {
		body := fmt.Appendf(nil, `{"n": %d, "even": %t}`, i, i%2 == 0)
		wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.resume", nil, body))
	}
	path := "/api/v1/subscribe/ai.resume?count=2&filter=" + url.QueryEscape("payload.even")
	got := func(hdr http.Header, p string) string {
		t.Helper()
		var out []string
		for _, ev := range e.subscribe(t, p, hdr) {
			var m struct{ Data string }
			if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, ev.id+":"+m.Data)
		}
		return strings.Join(out, " ")
	}
	if g, want := got(nil, path), `1:{"n": 0, "even": true} 3:{"n": 2, "even": true}`; g != want {
		t.Fatalf("first connection got %s, want %s", g, want)
	}
	// The reconnect: resume after event 3, matches only.
	if g, want := got(http.Header{"Last-Event-ID": {"3"}}, path), `5:{"n": 4, "even": true} 7:{"n": 6, "even": true}`; g != want {
		t.Fatalf("resume after 3 got %s, want %s", g, want)
	}
	// Last-Event-ID wins over start_seq; resuming after a non-match works.
	last := "/api/v1/subscribe/ai.resume?count=1&start_seq=1&filter=" + url.QueryEscape("payload.even")
	if g, want := got(http.Header{"Last-Event-ID": {"8"}}, last), `9:{"n": 8, "even": true}`; g != want {
		t.Fatalf("resume after 8 got %s, want %s", g, want)
	}

	for _, id := range []string{"x", "-1", "18446744073709551615"} {
		r := e.do(t, http.MethodGet, path, http.Header{"Last-Event-ID": {id}}, nil)
		if r.status != 400 || !strings.Contains(string(r.body), "Last-Event-ID") {
			t.Errorf("Last-Event-ID %q: %d %s", id, r.status, r.body)
		}
	}
}
