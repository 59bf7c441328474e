package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpapi"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/semaq"
)

// tokenEvents reads the token stream of id over SSE until the server ends
// it.
func (e *env) tokenEvents(t *testing.T, path string, hdr http.Header) []sse.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+path, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	r := sse.NewReader(resp.Body, 0)
	var evs []sse.Event
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
}

func TestTokensSSE(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := e.c.OpenTokenStream(ctx, "sse-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		// One at a time, so each token is a record of its own.
		if err := w.Write(ctx, fmt.Sprintf("t%d ", i)); err != nil {
			t.Fatal(err)
		}
		waitRecords(t, e, "sse-1", uint64(i+1))
	}
	if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop", Usage: &semaq.TokenUsage{Prompt: 1, Completion: 5, Total: 6}}); err != nil {
		t.Fatal(err)
	}

	text := func(evs []sse.Event) string {
		var b strings.Builder
		for _, ev := range evs {
			if ev.Type == "token" {
				c, err := semaq.ParseTokenChunk([]byte(ev.Data))
				if err != nil {
					t.Fatalf("event data is not a record: %v", err)
				}
				b.WriteString(c.Text)
			}
		}
		return b.String()
	}
	evs := e.tokenEvents(t, "/api/v1/tokens/sse-1", nil)
	if len(evs) != 6 || evs[0].ID != "1" || evs[5].Type != "final" || evs[5].ID != "6" {
		t.Fatalf("events %+v", evs)
	}
	if got := text(evs); got != "t0 t1 t2 t3 t4 " {
		t.Fatalf("text %q", got)
	}
	fin, _ := semaq.ParseTokenChunk([]byte(evs[5].Data))
	if fin.Final.Usage.Total != 6 {
		t.Fatalf("final %+v", fin.Final)
	}

	// A reconnect with Last-Event-ID resumes after that record.
	evs = e.tokenEvents(t, "/api/v1/tokens/sse-1", http.Header{"Last-Event-ID": {"3"}})
	if got := text(evs); got != "t3 t4 " || evs[0].ID != "4" {
		t.Fatalf("after Last-Event-ID 3: %q %+v", got, evs)
	}
	evs = e.tokenEvents(t, "/api/v1/tokens/sse-1?from_offset=4", nil)
	if got := text(evs); got != "t4 " {
		t.Fatalf("from_offset=4: %q", got)
	}

	// An aborted stream ends with an error event carrying the code.
	w2, _ := e.c.OpenTokenStream(ctx, "sse-2")
	_ = w2.Write(ctx, "x")
	_ = w2.Abort(ctx, &semaq.TokenError{Code: semaq.TokenErrWorkerLost, Message: "gone"})
	evs = e.tokenEvents(t, "/api/v1/tokens/sse-2", nil)
	last := evs[len(evs)-1]
	if last.Type != "error" || !strings.Contains(last.Data, `"code":"worker_lost"`) || text(evs) != "x" {
		t.Fatalf("aborted stream events %+v", evs)
	}
}

func TestTokensSSEBadRequest(t *testing.T) {
	e := setup(t)
	cases := []struct {
		path string
		hdr  http.Header
		want string
	}{
		{"/api/v1/tokens/a.b", nil, "request id"},
		{"/api/v1/tokens/x?from_seq=0", nil, "from_seq"},
		{"/api/v1/tokens/x?from_offset=-1", nil, "from_offset"},
		{"/api/v1/tokens/x", http.Header{"Last-Event-ID": {"abc"}}, "Last-Event-ID"},
	}
	for _, tc := range cases {
		wantError(t, e.do(t, http.MethodGet, tc.path, tc.hdr, nil), http.StatusBadRequest, tc.want)
	}
}

func waitRecords(t *testing.T, e *env, id string, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		last, err := e.c.LastTokenRecord(context.Background(), id)
		if err == nil && last != nil && last.Seq >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("record %d of %s not stored within 5s", n, id)
		}
		time.Sleep(time.Millisecond)
	}
}

// An id the broker never issued is a 404 at once, not an event stream
// that waits for records nobody will write.
func TestTokensUnknownIDIs404(t *testing.T) {
	e := setup(t)
	begin := time.Now()
	r := e.do(t, http.MethodGet, "/api/v1/tokens/never-issued", nil, nil)
	ae := wantError(t, r, http.StatusNotFound, "never-issued")
	if ae.Error.ErrCode != semaq.ErrCodeTokenStreamNotFound {
		t.Errorf("err_code %d, want %d", ae.Error.ErrCode, semaq.ErrCodeTokenStreamNotFound)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("answered after %s", took)
	}
	st, err := e.c.TokenStatus(context.Background(), "never-issued")
	if err != nil || st.Known {
		t.Fatalf("TokenStatus of an unknown id: %+v, %v", st, err)
	}

	// A stream that was written is known, with its records and its end.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := e.c.OpenTokenStream(ctx, "written")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
		t.Fatal(err)
	}
	st, err = e.c.TokenStatus(ctx, "written")
	if err != nil || !st.Known || !st.Ended || st.Records != 2 {
		t.Fatalf("TokenStatus of a closed stream: %+v, %v", st, err)
	}
	if evs := e.tokenEvents(t, "/api/v1/tokens/written", nil); len(evs) != 2 || evs[1].Type != "final" {
		t.Fatalf("events %+v", evs)
	}
}

// queueJob queues a request whose Nats-Msg-Id is id and waits until the
// broker knows it.
func queueJob(t *testing.T, e *env, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.c.AddQueue(ctx, semaq.QueueConfig{Name: "TOKQ", Subjects: []string{"tokq.>"}}); err != nil && !errors.Is(err, semaq.ErrStreamExists) {
		t.Fatal(err)
	}
	if _, err := e.c.Publish(ctx, "tokq.req", []byte("{}"), client.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the queued request "+id, func() bool {
		st, err := e.c.TokenStatus(ctx, id)
		return err == nil && st.Known
	})
}

// openTokens starts GET /api/v1/tokens/id and checks the headers came at
// once.
func (e *env) openTokens(t *testing.T, ctx context.Context, id string) *sse.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/api/v1/tokens/"+id, nil)
	begin := time.Now()
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("headers after %s", took)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET tokens/%s: %d %s", id, resp.StatusCode, b)
	}
	return sse.NewReader(resp.Body, 0)
}

// A known id with no record yet (a queued request) opens at once and ends
// with "not_started" when nothing comes within the bound.
func TestTokensKnownEmptyEndsAfterBound(t *testing.T) {
	httpapi.SetTokenFirstRecordWait(t, 300*time.Millisecond)
	e := setup(t)
	queueJob(t, e, "queued-1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := e.openTokens(t, ctx, "queued-1")
	begin := time.Now()
	ev, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != "error" || !strings.Contains(ev.Data, `"code":"not_started"`) {
		t.Fatalf("event %+v, want error not_started", ev)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("ended after %s", took)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the error event: %v, want the end", err)
	}
}

// A reader of a queued request that opened before its first record gets
// the records once the writer starts.
func TestTokensKnownEmptyThenWritten(t *testing.T) {
	e := setup(t)
	queueJob(t, e, "queued-2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := e.openTokens(t, ctx, "queued-2")
	w, err := e.c.OpenTokenStream(ctx, "queued-2")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, "hi"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
		t.Fatal(err)
	}
	var types []string
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
	}
	if strings.Join(types, ",") != "token,final" {
		t.Fatalf("events %v", types)
	}
}
