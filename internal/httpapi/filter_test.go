package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func TestSubscribeFilter(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for i := range 10 {
		wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.flt", nil, []byte(`{"n": `+strconv.Itoa(i)+`}`)))
	}
	events := e.subscribe(t, "/api/v1/subscribe/ai.flt?count=3&filter="+url.QueryEscape("payload.n == 0.0 || payload.n == 3.0 || payload.n == 4.0"), nil)
	var got []string
	for _, ev := range events {
		var m struct{ Data string }
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.id+":"+m.Data)
	}
	if want := []string{`1:{"n": 0}`, `4:{"n": 3}`, `5:{"n": 4}`}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}

	r := e.do(t, http.MethodGet, "/api/v1/subscribe/ai.flt?filter="+url.QueryEscape("payload.n >"), nil, nil)
	if r.status != 400 || !strings.Contains(string(r.body), "1:") {
		t.Errorf("bad filter: %d %s", r.status, r.body)
	}
}
