package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpapi"
)

// openRaw sends a GET on a connection that will never read its answer,
// with a receive buffer as small as the kernel allows.
func (e *env) openRaw(t *testing.T, path string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.(*net.TCPConn).SetReadBuffer(1024)
	if _, err := conn.Write([]byte("GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestSlowReadersDropped: event-stream clients that never read are
// dropped once an event waits longer than the write timeout; the shared
// broker connection is never cut, the consumers and goroutines go, and
// ordinary clients are served throughout.
func TestSlowReadersDropped(t *testing.T) {
	const payload = 256 << 10
	e := setupWith(t, payload, 0, func(o *httpapi.Options) {
		o.StreamWriteTimeout = 300 * time.Millisecond
	})
	baseConsumers := e.streamState(t, "AI").ConsumerCount
	baseGoroutines := runtime.NumGoroutine()
	var conns []net.Conn
	const readers = 8
	for range readers {
		conns = append(conns, e.openRaw(t, "/api/v1/subscribe/ai.flood?deliver=new"))
	}
	waitFor(t, "every reader's consumer", func() bool { return e.streamState(t, "AI").ConsumerCount == baseConsumers+readers })

	body := bytes.Repeat([]byte("p"), 100<<10)
	for range 100 { // 10 MB per reader: more than any socket buffer holds
		wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.flood", nil, body))
	}
	waitFor(t, "the slow readers to be dropped", func() bool { return e.streamState(t, "AI").ConsumerCount == baseConsumers })

	nc := e.c.Conn()
	if st := nc.Stats(); st.Reconnects != 0 || !nc.IsConnected() || nc.LastError() != nil {
		t.Fatalf("the shared connection suffered: %d reconnects, connected %v, last error %v", st.Reconnects, nc.IsConnected(), nc.LastError())
	}
	e.legit(t)
	for _, c := range conns {
		c.Close()
	}
	for deadline := time.Now().Add(20 * time.Second); runtime.NumGoroutine() > baseGoroutines+5; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before the readers", runtime.NumGoroutine(), baseGoroutines)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
}

// TestStreamCap: past MaxStreams open event streams, a new one (subscribe
// or tokens) is 503 with Retry-After; a slot freed is usable again.
func TestStreamCap(t *testing.T) {
	t.Parallel()
	e := setupWith(t, 64<<10, 0, func(o *httpapi.Options) { o.MaxStreams = 3 })
	wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.cap", nil, []byte("one")))
	var cancels []context.CancelFunc
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		cancels = append(cancels, cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/api/v1/subscribe/ai.cap?deliver=new", nil)
		resp, err := e.hc.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("stream: %v %v", resp, err)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/api/v1/subscribe/ai.cap", "/api/v1/tokens/req-1"} {
		r := e.do(t, http.MethodGet, p, nil, nil)
		wantError(t, r, http.StatusServiceUnavailable, "too many event streams")
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", p)
		}
	}
	wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.cap", nil, []byte("publish is not capped")))
	cancels[0]()
	waitFor(t, "a freed slot", func() bool {
		return e.do(t, http.MethodGet, "/api/v1/subscribe/ai.cap?count=1", nil, nil).status == 200
	})
}

// TestGetMakesNoLastingState: a GET neither creates a durable nor reads
// one it was not given on purpose; an ephemeral stream's consumer goes
// when the stream ends.
func TestGetMakesNoLastingState(t *testing.T) {
	t.Parallel()
	e := setupWith(t, 64<<10, 0, nil)
	for i := range 3 {
		wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.state", nil, []byte{'a' + byte(i)}))
	}
	base := e.streamState(t, "AI").ConsumerCount

	// An SDK durable with a position of its own.
	ctx := context.Background()
	sub, err := e.c.Subscribe(ctx, "ai.state", client.WithDurable("sdkdur"))
	if err != nil {
		t.Fatal(err)
	}
	sub.Close()
	base++

	for _, d := range []string{"ghost", "sdkdur"} {
		r := e.do(t, http.MethodGet, "/api/v1/subscribe/ai.state?durable="+d, nil, nil)
		wantError(t, r, http.StatusNotFound, "create it with POST /api/v1/durables")
	}
	if n := e.streamState(t, "AI").ConsumerCount; n != base {
		t.Fatalf("GETs left %d consumers, want %d", n, base)
	}
	// The SDK durable still starts at the first message: nothing acked it.
	sub, err = e.c.Subscribe(ctx, "ai.state", client.WithDurable("sdkdur"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := sub.Next(ctx)
	if err != nil || m.Seq != 1 {
		t.Fatalf("sdk durable after the GETs: %v %v", m, err)
	}
	sub.Close()

	// Ephemeral streams: ended by count, and by the client going away.
	if ev := e.subscribe(t, "/api/v1/subscribe/ai.state?count=2", nil); len(ev) != 2 {
		t.Fatalf("count=2 got %d events", len(ev))
	}
	cctx, cancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, e.base+"/api/v1/subscribe/ai.state?deliver=new", nil)
	resp, err := e.hc.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	waitFor(t, "the stream's consumer", func() bool { return e.streamState(t, "AI").ConsumerCount == base+1 })
	cancel()
	resp.Body.Close()
	waitFor(t, "consumers back to baseline", func() bool { return e.streamState(t, "AI").ConsumerCount == base })
}

// TestDurablesOptIn: a durable is made by POST, bounded in number and in
// life, read by GET from where the last reader stopped, and deleted.
func TestDurablesOptIn(t *testing.T) {
	t.Parallel()
	e := setupWith(t, 64<<10, 0, func(o *httpapi.Options) {
		o.MaxDurables = 2
		o.DurableInactive = 10 * time.Minute
	})
	for i := range 4 {
		wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.dash", nil, []byte{'a' + byte(i)}))
	}
	mk := func(body string) response {
		return e.do(t, http.MethodPost, "/api/v1/durables", jsonHdr(), []byte(body))
	}
	if r := mk(`{"name":"dash","subject":"ai.dash"}`); r.status != 201 || !strings.Contains(string(r.body), `"inactive_threshold_ms":600000`) {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if r := mk(`{"name":"dash","subject":"ai.dash"}`); r.status != 200 {
		t.Fatalf("create again: %d %s", r.status, r.body)
	}
	wantError(t, mk(`{"name":"dash","subject":"ai.other"}`), http.StatusConflict, "already has a consumer")
	if r := mk(`{"name":"second","subject":"ai.dash","deliver":"new"}`); r.status != 201 {
		t.Fatalf("create second: %d %s", r.status, r.body)
	}
	wantError(t, mk(`{"name":"third","subject":"ai.dash"}`), http.StatusTooManyRequests, "the limit")
	wantError(t, mk(`{"name":"x","subject":"ai.dash","name":"y"}`), http.StatusBadRequest, "appears twice")
	wantError(t, mk(`{"name":"x","subject":"ai.*.>x"}`), http.StatusBadRequest, "wildcard")

	js, err := jetstream.New(e.c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(context.Background(), "AI", "dash")
	if err != nil || cons.CachedInfo().Config.InactiveThreshold != 10*time.Minute {
		t.Fatalf("durable's inactive threshold: %v", err)
	}

	ids := func(evs []event) string {
		var out []string
		for _, ev := range evs {
			out = append(out, ev.id)
		}
		return strings.Join(out, ",")
	}
	if got := ids(e.subscribe(t, "/api/v1/subscribe/ai.dash?durable=dash&count=2", nil)); got != "1,2" {
		t.Fatalf("first read: %s", got)
	}
	if got := ids(e.subscribe(t, "/api/v1/subscribe/ai.dash?durable=dash&count=1", nil)); got != "3" {
		t.Fatalf("second read resumes: %s", got)
	}
	wantError(t, e.do(t, http.MethodGet, "/api/v1/subscribe/ai.other?durable=dash", nil, nil), http.StatusBadRequest, "follows subject ai.dash")
	r := e.do(t, http.MethodDelete, "/api/v1/durables/AI/dash", jsonHdr(), nil)
	var del map[string]bool
	if r.status != 200 || json.Unmarshal(r.body, &del) != nil || !del["deleted"] {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	wantError(t, e.do(t, http.MethodGet, "/api/v1/subscribe/ai.dash?durable=dash", nil, nil), http.StatusNotFound, "made over HTTP")
	if r := mk(`{"name":"third","subject":"ai.dash"}`); r.status != 201 {
		t.Fatalf("a slot freed by delete: %d %s", r.status, r.body)
	}
	e.legit(t)
}
