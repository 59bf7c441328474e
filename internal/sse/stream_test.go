package sse

import (
	"bufio"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The head goes out with Start or the first write, once; every write is
// flushed; the client reads the events and the keep-alive as written.
func TestStream(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	es := NewStream(rec, time.Second)
	if es.Started() || rec.Flushed {
		t.Fatal("the stream started before anything was written")
	}
	if err := es.Write(AppendEvent(nil, Event{ID: "1", Type: "token", Data: "a\nb"})); err != nil {
		t.Fatal(err)
	}
	if !es.Started() || !rec.Flushed {
		t.Fatalf("started %v, flushed %v after a write", es.Started(), rec.Flushed)
	}
	es.Start() // again: nothing
	if err := es.KeepAlive(); err != nil {
		t.Fatal(err)
	}
	res := rec.Result()
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if res.StatusCode != http.StatusOK {
		t.Errorf("status %d", res.StatusCode)
	}
	if got, want := rec.Body.String(), "id: 1\nevent: token\ndata: a\ndata: b\n\n: keepalive\n\n"; got != want {
		t.Fatalf("body %q, want %q", got, want)
	}
	evs := readAll(t, rec.Body.String())
	if len(evs) != 1 || evs[0].Data != "a\nb" || evs[0].Type != "token" || evs[0].ID != "1" {
		t.Fatalf("read back %+v", evs)
	}
}

// WriteHeader alone is the answer to a HEAD request.
func TestWriteHeader(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	WriteHeader(rec)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "text/event-stream" || rec.Body.Len() != 0 {
		t.Fatalf("code %d, header %v, body %q", rec.Code, rec.Header(), rec.Body)
	}
}

// A client that stops reading is dropped within the write timeout: the
// write that cannot finish fails, every later one fails at once, and a
// last event may still be tried.
func TestStreamSlowClient(t *testing.T) {
	t.Parallel()
	result := make(chan []error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		es := NewStream(w, 100*time.Millisecond)
		chunk := []byte("data: " + strings.Repeat("x", 64<<10) + "\n\n")
		var errs []error
		for range 4096 { // 256 MiB: far past what the sockets buffer
			if err := es.Write(chunk); err != nil {
				errs = append(errs, err, es.Write(chunk), es.KeepAlive(), es.WriteLast([]byte("event: error\ndata: slow\n\n"), time.Millisecond))
				break
			}
		}
		result <- errs
	}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	// Read the first line, then nothing more.
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	var errs []error
	select {
	case errs = <-result:
	case <-time.After(30 * time.Second):
		t.Fatal("a client that does not read was not dropped")
	}
	if len(errs) == 0 {
		t.Fatal("every write succeeded to a client that does not read")
	}
	if errors.Is(errs[0], ErrStreamFailed) {
		t.Errorf("the first failed write says %v, not why it failed", errs[0])
	}
	if !errors.Is(errs[1], ErrStreamFailed) || !errors.Is(errs[2], ErrStreamFailed) {
		t.Errorf("writes after the failure: %v, %v; want ErrStreamFailed", errs[1], errs[2])
	}
	if errors.Is(errs[3], ErrStreamFailed) {
		t.Errorf("WriteLast after the failure was not tried: %v", errs[3])
	}
}
