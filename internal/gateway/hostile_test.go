package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// recordingUpstream is an OpenAI-compatible server (the simulated model)
// that keeps the body of every request it gets.
type recordingUpstream struct {
	srv *httptest.Server
	mu  sync.Mutex
	got [][]byte
}

func newRecordingUpstream(t *testing.T, model string) *recordingUpstream {
	m, _ := sim.New(sim.Config{Tokens: 5})
	ru := &recordingUpstream{}
	h := sim.Handler(m, model)
	ru.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodPost { // not the worker's health checks (GET /models)
			ru.mu.Lock()
			ru.got = append(ru.got, b)
			ru.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ru.srv.Close)
	return ru
}

func (ru *recordingUpstream) bodies() [][]byte {
	ru.mu.Lock()
	defer ru.mu.Unlock()
	return append([][]byte(nil), ru.got...)
}

// errorOf reads an OpenAI error answer.
func errorOf(t *testing.T, resp *http.Response) *openai.Error {
	t.Helper()
	raw, _ := io.ReadAll(resp.Body)
	var eb openai.ErrorBody
	if err := json.Unmarshal(raw, &eb); err != nil || eb.Error == nil {
		t.Fatalf("status %d, body is not an OpenAI error: %s", resp.StatusCode, raw)
	}
	return eb.Error
}

// A body that encoding/json reads as one model and the upstream as
// another is refused before it is queued: nothing reaches the queue or
// the upstream, and the client is told which key.
func TestHostileRequestKeys(t *testing.T) {
	e := setup(t)
	up := newRecordingUpstream(t, "cheap")
	e.startWorker(t, worker.Config{Upstream: up.srv.URL + "/v1", Models: []string{"cheap"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := `"messages":[{"role":"user","content":"x"}]`
	cases := []struct{ name, body, param string }{
		{"case variant", `{"model":"o1-pro-expensive","Model":"cheap",` + m + `}`, "Model"},
		{"duplicate", `{"model":"o1-pro-expensive","model":"cheap",` + m + `}`, "model"},
		{"escaped duplicate", `{"model":"o1-pro-expensive","mod\u0065l":"cheap",` + m + `}`, "model"},
		{"folded stream", `{"model":"cheap","ſtream":true,` + m + `}`, "ſtream"},
		{"nested role", `{"model":"cheap","messages":[{"role":"user","ROLE":"system","content":"x"}]}`, "messages[0].ROLE"},
		{"max_tokens exponent", `{"model":"cheap",` + m + `,"max_tokens":1e999999}`, "max_tokens"},
		{"long number", `{"model":"cheap",` + m + `,"top_p":0.` + strings.Repeat("9", 200000) + `}`, "top_p"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				body := tc.body
				if stream {
					body = strings.Replace(body, `{`, `{"stream":true,`, 1)
					if strings.Contains(tc.body, "tream") {
						continue
					}
				}
				resp := e.post(t, ctx, []byte(body), nil)
				oe := errorOf(t, resp)
				resp.Body.Close()
				if resp.StatusCode != 400 || oe.Type != openai.TypeInvalidRequest || oe.Param == nil || *oe.Param != tc.param ||
					!strings.Contains(oe.Message, tc.param) {
					t.Fatalf("stream=%v: %d %+v param %v, want 400 naming %q", stream, resp.StatusCode, oe, oe.Param, tc.param)
				}
			}
		})
	}
	info, err := e.c.QueueInfo(ctx, semaq.InferQueue("cheap"))
	if err != nil || info.Status.Counters.Admitted != 0 {
		t.Fatalf("queue admitted %+v %v", info.Status.Counters, err)
	}
	if n := len(up.bodies()); n != 0 {
		t.Fatalf("the upstream was called %d times", n)
	}
	// A clean request reaches the upstream with exactly the model it was
	// accounted as.
	resp := e.post(t, ctx, chatBody("cheap", "fine", false, ""), nil)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("clean request: %d %s", resp.StatusCode, raw)
	}
	got := up.bodies()
	var fields map[string]json.RawMessage
	if len(got) != 1 || json.Unmarshal(got[0], &fields) != nil || string(fields["model"]) != `"cheap"` {
		t.Fatalf("upstream got %q", got)
	}
}

// A bad tenant, adapter, session or traceparent header is the client's
// mistake: 400 in OpenAI's shape naming the header, and nothing queued.
func TestHostileHeaders(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"h"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cases := []struct{ header, value string }{
		{"X-SemaQ-Tenant", "tenant a"},
		{"X-SemaQ-Tenant", "ténant"},
		{"X-SemaQ-Adapter", "lora one"},
		{"X-SemaQ-Adapter", strings.Repeat("a", 300)},
		{"X-SemaQ-Session", "sé"},
		{"traceparent", "garbage"},
		{"traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{"traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"},
		{"traceparent", strings.Repeat("0", 4000)},
	}
	for _, tc := range cases {
		t.Run(tc.header+"="+tc.value[:min(len(tc.value), 20)], func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				resp := e.post(t, ctx, chatBody("h", "x", stream, ""), http.Header{http.CanonicalHeaderKey(tc.header): {tc.value}})
				oe := errorOf(t, resp)
				resp.Body.Close()
				if resp.StatusCode != 400 || oe.Type != openai.TypeInvalidRequest || oe.Param == nil || *oe.Param != tc.header {
					t.Fatalf("%d %+v param %v, want 400 naming %s", resp.StatusCode, oe, oe.Param, tc.header)
				}
			}
		})
	}
	info, err := e.c.QueueInfo(ctx, semaq.InferQueue("h"))
	if err != nil || info.Status.Counters.Admitted != 0 {
		t.Fatalf("queue admitted %+v %v", info.Status.Counters, err)
	}
}

// hangingUpstream sends one token, then holds the request until release
// is called (defer it: the worker's cleanup waits for its requests);
// started receives once per request.
func hangingUpstream(t *testing.T, first bool) (url string, started chan struct{}, release func()) {
	started = make(chan struct{}, 8)
	held := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if !first {
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			started <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-held:
			}
			return
		}
		_, _ = io.WriteString(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush()
		started <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-held:
		}
	}))
	t.Cleanup(up.Close)
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release)
	return up.URL + "/v1", started, release
}

// The only worker of a model dies holding a request: the client gets an
// error (worker_lost) long before its own timeout, instead of keep-alives,
// and the request leaves the queue.
func TestOnlyWorkerKilled(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: kills workers and waits for their leases to lapse; runs without -short")
	}
	e := setup(t)
	const ackWait, ttl = 400 * time.Millisecond, 500 * time.Millisecond
	long := http.Header{"X-Semaq-Timeout": {"5m"}}
	check := func(t *testing.T, ctx context.Context, model string, start time.Time, code *string) {
		t.Helper()
		if code == nil || *code != semaq.TokenErrWorkerLost {
			t.Fatalf("error code %v, want %s", code, semaq.TokenErrWorkerLost)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("the error came %s after the kill", d)
		}
		waitFor(t, func() bool {
			info, err := e.c.QueueInfo(ctx, semaq.InferQueue(model))
			return err == nil && info.Status.Queued == 0 && info.Status.Held == 0 && info.Status.Delayed == 0
		})
	}

	t.Run("streamed, mid-stream", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a := e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"solo1"}, AckWait: ackWait, AnnounceTTL: ttl,
			Sim: sim.Config{Tokens: 100000, TokensPerSec: 100}})
		resp := e.post(t, ctx, chatBody("solo1", "kill me", true, ""), long)
		defer resp.Body.Close()
		r := sse.NewReader(resp.Body, 0)
		var s streamed
		readEvents(t, r, &s, 5)
		a.kill()
		killed := time.Now()
		readEvents(t, r, &s, -1)
		if s.err == nil || s.done {
			t.Fatalf("after the kill: err %+v done %v", s.err, s.done)
		}
		check(t, ctx, "solo1", killed, s.err.Code)
		if full := sim.Answer("user: kill me", 100000, 0); !strings.HasPrefix(full, s.text) {
			t.Fatalf("the tokens received are not a prefix of the answer: %q", s.text)
		}
		// A reader replaying the stream sees the same end, not a stream
		// left open until its retention: the broker ended it.
		tr, err := e.c.ReadTokens(ctx, resp.Header.Get(semaq.HdrHTTPRequestID))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		for {
			_, err := tr.Next(ctx)
			if err == nil {
				continue
			}
			if te, ok := errors.AsType[*semaq.TokenError](err); !ok || te.Code != semaq.TokenErrWorkerLost {
				t.Fatalf("replaying reader ended with %v, want %s", err, semaq.TokenErrWorkerLost)
			}
			break
		}
	})

	for _, tc := range []struct {
		name, model string
		stream      bool
	}{
		{"not streamed", "solo2", false},
		{"streamed, before the first token reached the client", "solo3", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			url, started, release := hangingUpstream(t, !tc.stream)
			defer release()
			a := e.startWorker(t, worker.Config{Upstream: url, Models: []string{tc.model}, AckWait: ackWait, AnnounceTTL: ttl})
			answer := make(chan *http.Response, 1)
			go func() { answer <- e.post(t, ctx, chatBody(tc.model, "x", tc.stream, ""), long) }()
			<-started
			a.kill()
			killed := time.Now()
			resp := <-answer
			defer resp.Body.Close()
			oe := errorOf(t, resp)
			if resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %d %+v", resp.StatusCode, oe)
			}
			check(t, ctx, tc.model, killed, oe.Code)
		})
	}
}

// GET /v1/models lists only models that can be served: announced by a
// live worker and with a queue. A model announced without a queue is
// neither listed nor accepted.
func TestModelsNeedAQueue(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.c.AddQueue(ctx, semaq.QueueConfig{Name: semaq.InferQueue("real"), Subjects: []string{semaq.InferSubject("real")}, Storage: "memory"}); err != nil {
		t.Fatal(err)
	}
	an, err := e.c.Announce(ctx, semaq.Agent{ID: "liar", Intents: []string{semaq.InferIntent}, Capabilities: map[string]string{semaq.CapModels: "ghost,real"}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Stop()
	resp, err := http.Get(e.base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list openai.ModelList
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || len(list.Data) != 1 || list.Data[0].ID != "real" {
		t.Fatalf("models %+v %v", list, err)
	}
	resp = e.post(t, ctx, chatBody("ghost", "x", false, ""), nil)
	oe := errorOf(t, resp)
	resp.Body.Close()
	if resp.StatusCode != 404 || oe.Code == nil || *oe.Code != "model_not_found" {
		t.Fatalf("ghost model: %d %+v", resp.StatusCode, oe)
	}
}
