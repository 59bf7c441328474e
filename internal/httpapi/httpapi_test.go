package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/httpapi"
	"github.com/semaq/semaq/semaq"
)

// maxPayload is the broker limit in these tests: small, so the 413 cases
// send little.
const maxPayload = 8 << 10

// env is one broker with stream AI on ai.> and an SDK client of it.
type env struct {
	base string // http://host:port
	c    *client.Client
	hc   *http.Client
}

func setup(t *testing.T) *env {
	t.Helper()
	srv := brokertest.Start(t, func(c *broker.Config) { c.MaxPayload = maxPayload })
	c := brokertest.Connect(t, srv)
	brokertest.AddStream(t, c, "AI", "ai.>")
	return &env{
		base: "http://" + srv.HTTPAddr(),
		c:    c,
		// A redirect would be a bug: the API never sends one.
		hc: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends one request and reads the whole answer.
func (e *env) do(t *testing.T, method, path string, hdr http.Header, body []byte) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading answer: %v", method, path, err)
	}
	return response{resp.StatusCode, resp.Header, b}
}

func (e *env) streamState(t *testing.T, name string) semaq.StreamState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := e.c.StreamInfo(ctx, name)
	if err != nil {
		t.Fatalf("stream info %s: %v", name, err)
	}
	return info.State
}

type apiError struct {
	Error struct {
		Code    int    `json:"code"`
		ErrCode uint16 `json:"err_code"`
		Message string `json:"message"`
	} `json:"error"`
}

// wantError checks an error answer: the status, a JSON body of the error
// shape whose code repeats the status, and a message containing want.
func wantError(t *testing.T, r response, status int, want string) apiError {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var e apiError
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, r.body)
	}
	if e.Error.Code != status {
		t.Errorf("error code %d, want %d", e.Error.Code, status)
	}
	if !strings.Contains(e.Error.Message, want) {
		t.Errorf("error message %q does not contain %q", e.Error.Message, want)
	}
	return e
}

type ack struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
}

// wantAck checks a publish answer has exactly stream, seq and duplicate.
func wantAck(t *testing.T, r response) ack {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("publish: status %d, want 200; body %s", r.status, r.body)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatalf("ack is not JSON: %v: %s", err, r.body)
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"cancel_token", "duplicate", "seq", "stream"}) {
		t.Errorf("ack fields %v, want cancel_token, duplicate, seq, stream: %s", keys, r.body)
	}
	var a ack
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do(t, http.MethodGet, "/healthz", nil, nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("healthz: %d %q %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	var b struct{ Status string }
	if err := json.Unmarshal(r.body, &b); err != nil || b.Status != "ok" {
		t.Fatalf("healthz body %s (%v), want status ok", r.body, err)
	}
}

func TestPublishNormalisesEnvelope(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const traceID = "4BF92F3577B34DA6A3CE929D0E0E4736"
	hdr := http.Header{}
	hdr.Set("AI-Model", "llama3-70b")
	hdr.Set("X-Model-Version", "2024-06")
	hdr.Set("X-Lora-Adapter-ID", "sql-lora")
	hdr.Set("AI-Priority", "high")
	hdr.Set("AI-Tenant", "acme")
	hdr.Set("X-AI-Intent", "summarize")
	hdr.Set("X-AI-Timeout", "8s")
	hdr.Set("X-Trace-ID", traceID)
	hdr.Set("Nats-Header-Request-Id", "r-17")
	hdr.Set("X-Not-Forwarded", "nope")
	before := time.Now()
	a := wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.inference.llm", hdr, []byte("hello")))
	if a.Stream != "AI" || a.Seq != 1 || a.Duplicate {
		t.Fatalf("ack %+v, want AI/1/not duplicate", a)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := e.c.Subscribe(ctx, "ai.inference.llm", client.WithMaxMessages(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != "hello" || m.Seq != 1 {
		t.Fatalf("stored %q at %d, want hello at 1", m.Data, m.Seq)
	}
	for name, want := range map[string]string{
		semaq.HdrModel:        "llama3-70b",
		semaq.HdrModelVersion: "2024-06",
		semaq.HdrAdapter:      "sql-lora",
		semaq.HdrPriority:     "2",
		semaq.HdrTenant:       "acme",
		semaq.HdrIntent:       "summarize",
		semaq.HdrTimeout:      "8s",
		"Request-Id":          "r-17",
	} {
		if got := m.Header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	for _, gone := range []string{"X-Model-Version", "X-Lora-Adapter-Id", "X-Ai-Intent", "X-Ai-Timeout", "X-Trace-Id", "X-Not-Forwarded", "Nats-Header-Request-Id"} {
		if _, ok := m.Header[gone]; ok {
			t.Errorf("header %s was stored", gone)
		}
	}
	if tp := m.Header.Get(semaq.HdrTraceParent); !strings.HasPrefix(tp, "00-"+strings.ToLower(traceID)+"-") {
		t.Errorf("traceparent %q does not carry trace id %s", tp, traceID)
	}
	recv, err := time.Parse(time.RFC3339Nano, m.Header.Get(semaq.HdrReceived))
	if err != nil || recv.Before(before.Add(-time.Second)) || recv.After(time.Now().Add(time.Second)) {
		t.Errorf("AI-Received %q (%v) is not the publish time", m.Header.Get(semaq.HdrReceived), err)
	}
	env, err := m.Envelope()
	if err != nil {
		t.Fatalf("stored envelope does not parse: %v", err)
	}
	if d := env.Deadline.Sub(recv); d != 8*time.Second {
		t.Errorf("AI-Deadline is AI-Received + %s, want 8s", d)
	}
}

func TestPublishDuplicate(t *testing.T) {
	t.Parallel()
	e := setup(t)
	hdr := http.Header{"Nats-Msg-Id": {"order-1"}}
	first := e.do(t, http.MethodPost, "/api/v1/publish/ai.orders", hdr, []byte("a"))
	if !bytes.Contains(first.body, []byte(`"duplicate":false`)) {
		t.Errorf("first ack %s does not say duplicate:false", first.body)
	}
	a1 := wantAck(t, first)
	a2 := wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.orders", hdr, []byte("a")))
	if a1.Duplicate || !a2.Duplicate || a1.Seq != a2.Seq || a1.Stream != a2.Stream {
		t.Fatalf("acks %+v then %+v, want the second a duplicate of the first", a1, a2)
	}
	if st := e.streamState(t, "AI"); st.Messages != 1 {
		t.Fatalf("stream holds %d messages, want 1", st.Messages)
	}
}

func TestPublishRejected(t *testing.T) {
	t.Parallel()
	e := setup(t)
	// One message stored first, so "unchanged" is checked against a stream
	// that is not empty.
	wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.x", nil, []byte("seed")))
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		subject string
		hdr     http.Header
		body    []byte
		status  int
		errCode uint16
		want    string
	}{
		{"bad priority", "ai.x", h("AI-Priority", "urgent"), nil, 400, semaq.ErrCodeBadEnvelope, "invalid header AI-Priority"},
		{"unparsable timeout", "ai.x", h("AI-Timeout", "soon"), nil, 400, semaq.ErrCodeBadEnvelope, "invalid header AI-Timeout"},
		{"unparsable timeout alias", "ai.x", h("X-AI-Timeout", "soon"), nil, 400, semaq.ErrCodeBadEnvelope, "invalid header X-AI-Timeout"},
		{"oversize value", "ai.x", h("AI-Model", strings.Repeat("m", semaq.MaxEnvelopeValue+1)), nil, 400, semaq.ErrCodeBadEnvelope, "invalid header AI-Model"},
		{"bad traceparent", "ai.x", h("traceparent", "00-xyz"), nil, 400, semaq.ErrCodeBadEnvelope, "invalid header traceparent"},
		{"given twice", "ai.x", h("AI-Model", "a", "AI-Model", "b"), nil, 400, semaq.ErrCodeBadEnvelope, "invalid header AI-Model"},
		{"alias and canonical", "ai.x", h("AI-Intent", "a", "X-AI-Intent", "b"), nil, 400, semaq.ErrCodeBadEnvelope, "given twice"},
		{"ttl under a second", "ai.x", h("Nats-TTL", "0"), nil, 400, semaq.ErrCodeBadEnvelope, "invalid header Nats-TTL"},
		{"custom header without name", "ai.x", h("Nats-Header-", "x"), nil, 400, semaq.ErrCodeBadEnvelope, "invalid header Nats-Header-"},
		{"custom envelope header", "ai.x", h("Nats-Header-AI-Priority", "urgent"), nil, 400, semaq.ErrCodeBadEnvelope, "invalid header AI-Priority"},
		{"header block too large", "ai.x", h("Nats-Header-Big", strings.Repeat("b", 17<<10)), nil, 400, semaq.ErrCodeBadEnvelope, "the limit is"},
		{"wildcard *", "ai.*", nil, nil, 400, semaq.ErrCodeBadRequest, "wildcard"},
		{"wildcard >", "ai.>", nil, nil, 400, semaq.ErrCodeBadRequest, "wildcard"},
		{"empty token", "ai..x", nil, nil, 400, semaq.ErrCodeBadRequest, "empty token"},
		{"space", "ai.a b", nil, nil, 400, semaq.ErrCodeBadRequest, "space"},
		{"management api", "$SQ.API.STREAM.DELETE.AI", nil, nil, 400, semaq.ErrCodeBadRequest, "reserved"},
		{"inbox", "_INBOX.x", nil, nil, 400, semaq.ErrCodeBadRequest, "reserved"},
		{"body too large", "ai.x", nil, make([]byte, maxPayload+1), 413, semaq.ErrCodeTooLarge, "larger than the limit"},
		{"body and headers too large", "ai.x", h("AI-Model", "m"), make([]byte, maxPayload), 413, semaq.ErrCodeTooLarge, "limit"},
		{"no stream", "nowhere.x", nil, []byte("x"), 404, semaq.ErrCodeNoStream, "no stream captures subject nowhere.x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.streamState(t, "AI")
			r := e.do(t, http.MethodPost, "/api/v1/publish/"+url.PathEscape(tc.subject), tc.hdr, tc.body)
			if got := wantError(t, r, tc.status, tc.want); got.Error.ErrCode != tc.errCode {
				t.Errorf("err_code %d, want %d", got.Error.ErrCode, tc.errCode)
			}
			after := e.streamState(t, "AI")
			if after.Messages != before.Messages || after.LastSeq != before.LastSeq {
				t.Errorf("stream went from %d messages (last %d) to %d (last %d); want unchanged",
					before.Messages, before.LastSeq, after.Messages, after.LastSeq)
			}
		})
	}
	if _, err := e.c.StreamInfo(context.Background(), "AI"); err != nil {
		t.Fatalf("stream AI is gone after the rejected publishes: %v", err)
	}
}

func TestRouting(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
		want         string
	}{
		{"GET", "/api/v1/publish/ai.x", 405, "POST", "not allowed"},
		{"PUT", "/api/v1/publish/ai.x", 405, "POST", "not allowed"},
		{"POST", "/healthz", 405, "GET, HEAD", "not allowed"},
		{"DELETE", "/api/v1/streams", 405, "GET, HEAD", "not allowed"},
		{"POST", "/api/v1/subscribe/ai.x", 405, "GET, HEAD", "not allowed"},
		{"GET", "/nope", 404, "", "no such endpoint"},
		{"GET", "/api/v2/streams", 404, "", "no such endpoint"},
		{"POST", "/api/v1/publish/", 404, "", "no such endpoint"},
		{"POST", "/api/v1/publish/..", 404, "", "no such endpoint"},
		{"POST", "/api/v1/publish/.", 404, "", "no such endpoint"},
		{"GET", "/api//v1/streams", 404, "", "no such endpoint"},
		{"POST", "/api/v1/publish/%2E", 400, "", "empty token"},
		{"GET", "/api/v1/streams/NOPE", 404, "", "not found"},
		{"GET", "/api/v1/streams/a.b", 400, "", "stream name"},
		{"GET", "/api/v1/subscribe/nowhere.x", 404, "", "no stream captures"},
		{"GET", "/api/v1/subscribe/ai.x?count=0", 400, "", "count"},
		{"GET", "/api/v1/subscribe/ai.x?deliver=last", 400, "", "deliver"},
		{"GET", "/api/v1/subscribe/ai.x?start_seq=0", 400, "", "start_seq"},
		{"GET", "/api/v1/subscribe/ai.x?durable=a.b", 400, "", "durable"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := e.do(t, tc.method, tc.path, nil, nil)
			wantError(t, r, tc.status, tc.want)
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
		})
	}
	r := e.do(t, http.MethodGet, "/api/v1/subscribe/ai.x", http.Header{"Last-Event-Id": {"x"}}, nil)
	wantError(t, r, 400, "Last-Event-ID")
}

func TestStreams(t *testing.T) {
	t.Parallel()
	e := setup(t)
	brokertest.AddStream(t, e.c, "LOGS", "logs.>")
	r := e.do(t, http.MethodGet, "/api/v1/streams", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("streams: %d %s", r.status, r.body)
	}
	var list semaq.StreamListResponse
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatalf("streams body: %v: %s", err, r.body)
	}
	var names []string
	for _, s := range list.Streams {
		names = append(names, s.Config.Name)
	}
	if !slices.Equal(names, []string{"AI", "LOGS"}) {
		t.Fatalf("streams %v, want [AI LOGS]", names)
	}
	if s := list.Streams[0].Config.Subjects; !slices.Equal(s, []string{"ai.>"}) {
		t.Errorf("AI subjects %v, want [ai.>]", s)
	}

	wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/logs.app", nil, []byte("x")))
	r = e.do(t, http.MethodGet, "/api/v1/streams/LOGS", nil, nil)
	var info semaq.StreamInfo
	if err := json.Unmarshal(r.body, &info); err != nil || r.status != 200 {
		t.Fatalf("stream LOGS: %d %s (%v)", r.status, r.body, err)
	}
	if info.Config.Name != "LOGS" || info.State.Messages != 1 {
		t.Fatalf("stream LOGS: name %q, %d messages; want LOGS with 1", info.Config.Name, info.State.Messages)
	}
}

// event is one Server-Sent Event.
type event struct {
	id, name, data string
}

// readEvent reads the next event, skipping comments; io.EOF when the stream
// ended between events.
func readEvent(br *bufio.Reader) (event, error) {
	var ev event
	seen := false
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err == io.EOF && !seen && line == "" {
				return ev, io.EOF
			}
			return ev, errors.Join(errors.New("stream ended inside an event"), err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if seen {
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			seen = true
			switch field {
			case "id":
				ev.id = value
			case "event":
				ev.name = value
			case "data":
				ev.data += value
			}
		}
	}
}

// subscribe reads every event of one subscribe request until the server
// ends the stream.
func (e *env) subscribe(t *testing.T, path string, hdr http.Header) []event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("subscribe: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var out []event
	br := bufio.NewReader(resp.Body)
	for {
		ev, err := readEvent(br)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading events after %d: %v", len(out), err)
		}
		out = append(out, ev)
	}
}

func TestSubscribeSSE(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for i := 1; i <= 3; i++ {
		hdr := http.Header{"Ai-Priority": {"high"}, "Nats-Header-N": {strconv.Itoa(i)}}
		wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.sse", hdr, []byte("msg "+strconv.Itoa(i))))
	}

	events := e.subscribe(t, "/api/v1/subscribe/ai.sse?count=3", nil)
	if len(events) != 3 {
		t.Fatalf("got %d events, want 3: %+v", len(events), events)
	}
	for i, ev := range events {
		seq := i + 1
		if ev.name != "message" || ev.id != strconv.Itoa(seq) {
			t.Errorf("event %d: %q id %q, want message id %d", i, ev.name, ev.id, seq)
		}
		var m struct {
			Subject string
			Stream  string
			Seq     uint64
			Headers map[string]string
			Data    string
		}
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			t.Fatalf("event %d data is not JSON: %v: %s", i, err, ev.data)
		}
		if m.Subject != "ai.sse" || m.Stream != "AI" || m.Seq != uint64(seq) || m.Data != "msg "+strconv.Itoa(seq) {
			t.Errorf("event %d: %+v", i, m)
		}
		if m.Headers[semaq.HdrPriority] != "2" || m.Headers["N"] != strconv.Itoa(seq) || m.Headers[semaq.HdrReceived] == "" {
			t.Errorf("event %d headers %v", i, m.Headers)
		}
	}

	// An EventSource reconnecting after event 2 gets only event 3.
	events = e.subscribe(t, "/api/v1/subscribe/ai.sse?count=1", http.Header{"Last-Event-Id": {"2"}})
	if len(events) != 1 || events[0].id != "3" || events[0].name != "message" {
		t.Fatalf("resumed after 2: %+v, want one message with id 3", events)
	}
	// start_seq does the same for a client without Last-Event-ID.
	events = e.subscribe(t, "/api/v1/subscribe/ai.sse?count=1&start_seq=2", nil)
	if len(events) != 1 || events[0].id != "2" {
		t.Fatalf("start_seq=2: %+v, want one message with id 2", events)
	}
	// A wildcard subscription reads the stream's matching subjects.
	events = e.subscribe(t, "/api/v1/subscribe/"+url.PathEscape("ai.*")+"?count=2", nil)
	if len(events) != 2 || events[1].id != "2" {
		t.Fatalf("ai.*: %+v, want ids 1 and 2", events)
	}
}

func TestSubscribeHead(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do(t, http.MethodHead, "/api/v1/subscribe/ai.x", nil, nil)
	if r.status != 200 || r.header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HEAD subscribe: %d %q", r.status, r.header.Get("Content-Type"))
	}
	if r := e.do(t, http.MethodHead, "/api/v1/subscribe/nowhere.x", nil, nil); r.status != 404 {
		t.Fatalf("HEAD subscribe without stream: %d, want 404", r.status)
	}
	if st := e.streamState(t, "AI"); st.ConsumerCount != 0 {
		t.Fatalf("HEAD left %d consumers", st.ConsumerCount)
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	serve := func(h http.Handler, method, path string) response {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "http://localhost"+path, nil))
		return response{rec.Code, rec.Header(), rec.Body.Bytes()}
	}

	notReady := httpapi.New(httpapi.Options{Client: c, Ready: func() error { return errors.New("jetstream not enabled") }})
	r := serve(notReady, http.MethodGet, "/healthz")
	var b struct {
		Status string
		Error  struct{ Code int }
	}
	if err := json.Unmarshal(r.body, &b); err != nil || r.status != 503 || b.Status != "unavailable" || b.Error.Code != 503 ||
		!bytes.Contains(r.body, []byte("jetstream not enabled")) {
		t.Fatalf("healthz when not ready: %d %s (%v)", r.status, r.body, err)
	}

	// A handler without a broker connection answers, rather than panics.
	orphan := httpapi.New(httpapi.Options{})
	if r := serve(orphan, http.MethodGet, "/healthz"); r.status != 503 || !bytes.Contains(r.body, []byte(`"status":"unavailable"`)) {
		t.Fatalf("healthz without a connection: %d %s", r.status, r.body)
	}
	for _, path := range []string{"/api/v1/streams", "/api/v1/streams/AI", "/api/v1/subscribe/ai.x"} {
		wantError(t, serve(orphan, http.MethodGet, path), 503, "no connection")
	}
	wantError(t, serve(orphan, http.MethodPost, "/api/v1/publish/ai.x"), 503, "no connection")
}

// An open event stream must not hold up a graceful shutdown of the server
// it runs in: CloseStreams, registered with RegisterOnShutdown, ends it.
func TestCloseStreamsUnblocksShutdown(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	brokertest.AddStream(t, c, "AI", "ai.>")
	h := httpapi.New(httpapi.Options{Client: c})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	hs.RegisterOnShutdown(h.CloseStreams)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/api/v1/subscribe/ai.x", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, ": subscribed") {
		t.Fatalf("stream opened with %q, %v", line, err)
	}

	if err := hs.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with an open event stream: %v", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("serve: %v", err)
	}
	if _, err := readEvent(br); err != io.EOF {
		t.Fatalf("stream did not end cleanly: %v", err)
	}
}

// A publish body that stops arriving is bounded by BodyTimeout, since the
// server cannot have a global read timeout beside event streams.
func TestPublishBodyTimeout(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	brokertest.AddStream(t, c, "AI", "ai.>")
	hs := httptest.NewServer(httpapi.New(httpapi.Options{Client: c, BodyTimeout: 200 * time.Millisecond}))
	t.Cleanup(hs.Close)

	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// Ten bytes promised, three sent.
	if _, err := io.WriteString(conn, "POST /api/v1/publish/ai.x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nabc"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	wantError(t, response{resp.StatusCode, resp.Header, b}, http.StatusRequestTimeout, "body not received within 200ms")
	if st, err := c.StreamInfo(context.Background(), "AI"); err != nil || st.State.Messages != 0 {
		t.Fatalf("stream after a timed-out publish: %+v %v", st, err)
	}
}
