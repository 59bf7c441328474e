package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// env is a broker with its HTTP port and a way to start workers.
type env struct {
	srv  *broker.Server
	base string // http://host:port
	c    *client.Client
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWait(t, testModelWait)
}

// testModelWait is how long the tests' requests for a model no worker
// serves wait for one (gateway_model_wait), not the default 3 s: most of
// them mean the 404.
const testModelWait = 200 * time.Millisecond

// setupWait is setup with the gateway's model wait.
func setupWait(t *testing.T, wait time.Duration) *env {
	t.Helper()
	srv := brokertest.Start(t, func(c *broker.Config) { c.GatewayModelWait = wait })
	return &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.Connect(t, srv)}
}

// runningWorker is a worker started by a test, on its own connection.
type runningWorker struct {
	w    *worker.Worker
	c    *client.Client
	stop context.CancelFunc
	done chan struct{}
}

// kill makes the worker vanish as a crashed process does: its connection
// drops, nothing is answered or cleaned up. (Its goroutines run on until
// their model calls end; the test's cleanup waits for them.)
func (rw *runningWorker) kill() {
	rw.c.Conn().Close()
	rw.stop()
}

// startWorker runs a worker on a connection of its own (opts: its key,
// with auth on) until the test ends.
func (e *env) startWorker(t *testing.T, cfg worker.Config, opts ...client.Option) *runningWorker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, e.srv.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	rw := &runningWorker{w: w, c: c, stop: stop, done: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(rw.done)
		if err := w.RunReady(runCtx, func() { close(ready) }); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	select {
	case <-ready:
	case <-rw.done:
		t.Fatal("worker stopped before serving")
	case <-time.After(10 * time.Second):
		t.Fatal("worker not ready within 10s")
	}
	t.Cleanup(func() {
		stop()
		<-rw.done
		c.Close()
	})
	return rw
}

// addUser adds a user with e's client (an admin's, with auth on) and
// returns its key.
func (e *env) addUser(t *testing.T, r semaq.UserAddRequest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.c.AddUser(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Key
}

func chatBody(model, prompt string, stream bool, extra string) []byte {
	b := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"stream":%t%s}`, model, prompt, stream, extra)
	return []byte(b)
}

func (e *env) post(t *testing.T, ctx context.Context, body []byte, hdr http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// streamed is a streamed answer as a client parses it.
type streamed struct {
	text   string
	chunks []openai.ChatCompletionChunk
	finish string
	usage  *openai.Usage
	done   bool          // data: [DONE] came last
	err    *openai.Error // an error event
}

func readStream(t *testing.T, body io.Reader) streamed {
	t.Helper()
	var s streamed
	readEvents(t, sse.NewReader(body, 0), &s, -1)
	return s
}

// readEvents adds up to max events (all when max < 0) to s.
func readEvents(t *testing.T, r *sse.Reader, s *streamed, max int) {
	t.Helper()
	for n := 0; n != max; n++ {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("reading the event stream: %v", err)
		}
		if s.done {
			t.Fatalf("event after [DONE]: %q", ev.Data)
		}
		if ev.Data == "[DONE]" {
			s.done = true
			continue
		}
		var c struct {
			openai.ChatCompletionChunk
			Error *openai.Error `json:"error"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			t.Fatalf("event is not JSON: %q", ev.Data)
		}
		if c.Error != nil {
			s.err = c.Error
			continue
		}
		if c.Object != "chat.completion.chunk" || !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Fatalf("not a chat.completion.chunk: %q", ev.Data)
		}
		s.chunks = append(s.chunks, c.ChatCompletionChunk)
		if c.Usage != nil {
			s.usage = c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				s.text += *ch.Delta.Content
			}
			if ch.FinishReason != nil {
				s.finish = *ch.FinishReason
			}
		}
	}
}

func TestChatCompletionsThroughSim(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-1"}, Sim: sim.Config{Tokens: 40, Seed: 3}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := sim.Answer("user: hello gateway", 40, 3)

	t.Run("streamed", func(t *testing.T) {
		resp := e.post(t, ctx, chatBody("sim-1", "hello gateway", true, `,"stream_options":{"include_usage":true}`), nil)
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get(semaq.HdrHTTPRequestID) == "" {
			t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
		}
		s := readStream(t, resp.Body)
		if s.text != want || s.finish != "stop" || !s.done || s.err != nil {
			t.Fatalf("text %q finish %q done %v err %v; want %q", s.text, s.finish, s.done, s.err, want)
		}
		if s.chunks[0].Choices[0].Delta.Role != "assistant" {
			t.Fatal("first chunk does not carry the assistant role")
		}
		last := s.chunks[len(s.chunks)-1]
		if s.usage == nil || len(last.Choices) != 0 || s.usage.CompletionTokens != 40 || s.usage.TotalTokens != s.usage.PromptTokens+40 {
			t.Fatalf("usage chunk %+v", last)
		}
	})
	t.Run("streamed without usage", func(t *testing.T) {
		resp := e.post(t, ctx, chatBody("sim-1", "hello gateway", true, ""), nil)
		defer resp.Body.Close()
		s := readStream(t, resp.Body)
		if s.text != want || s.usage != nil {
			t.Fatalf("text %q usage %+v", s.text, s.usage)
		}
	})
	t.Run("not streamed", func(t *testing.T) {
		resp := e.post(t, ctx, chatBody("sim-1", "hello gateway", false, `,"max_tokens":7`), nil)
		defer resp.Body.Close()
		var out openai.ChatCompletion
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		if out.Object != "chat.completion" || *out.Choices[0].Message.Content != sim.Answer("user: hello gateway", 7, 3) ||
			out.Choices[0].FinishReason != "length" || out.Usage.CompletionTokens != 7 {
			t.Fatalf("answer %+v", out)
		}
	})
	t.Run("trace and session on every record", func(t *testing.T) {
		const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		resp := e.post(t, ctx, chatBody("sim-1", "hello gateway", true, ""), http.Header{
			"Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01"}, "X-Semaq-Session": {"chain-7"}})
		s := readStream(t, resp.Body)
		resp.Body.Close()
		if s.text != want {
			t.Fatalf("text %q", s.text)
		}
		// Another agent down the chain reads the same stream by its id.
		r, err := e.c.ReadTokens(ctx, resp.Header.Get(semaq.HdrHTTPRequestID))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		n := 0
		for {
			c, err := r.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			n++
			if !strings.Contains(c.TraceParent, traceID) || c.Session != "chain-7" {
				t.Fatalf("record %d: traceparent %q session %q", c.Seq, c.TraceParent, c.Session)
			}
		}
		if n < 2 {
			t.Fatalf("%d records", n)
		}
	})
	t.Run("models", func(t *testing.T) {
		resp, err := http.Get(e.base + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list openai.ModelList
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) != 1 || list.Data[0].ID != "sim-1" {
			t.Fatalf("models %+v %v", list, err)
		}
	})
}

// The official OpenAI Go client works against the gateway unchanged.
func TestOfficialOpenAIClient(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"gpt-sim"}, Sim: sim.Config{Tokens: 25}})
	c := oa.NewClient(option.WithBaseURL(e.base+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := sim.Answer("user: official client", 25, 0)

	params := oa.ChatCompletionNewParams{Model: "gpt-sim", Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("official client")}}
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != want || resp.Usage.CompletionTokens != 25 {
		t.Fatalf("non-streamed: %q usage %+v", resp.Choices[0].Message.Content, resp.Usage)
	}

	params.StreamOptions = oa.ChatCompletionStreamOptionsParam{IncludeUsage: oa.Bool(true)}
	st := c.Chat.Completions.NewStreaming(ctx, params)
	acc := oa.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != want || acc.Usage.CompletionTokens != 25 {
		t.Fatalf("streamed: %q usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}

	// A function call streamed in fragments comes out whole.
	params.Messages = []oa.ChatCompletionMessageParamUnion{oa.UserMessage("please /tool get_weather")}
	st = c.Chat.Completions.NewStreaming(ctx, params)
	acc = oa.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	calls := acc.Choices[0].Message.ToolCalls
	if len(calls) != 1 || calls[0].Function.Name != "get_weather" || !json.Valid([]byte(calls[0].Function.Arguments)) ||
		acc.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("tool calls %+v finish %q", calls, acc.Choices[0].FinishReason)
	}
	resp, err = c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if tc := resp.Choices[0].Message.ToolCalls; len(tc) != 1 || tc[0].Function.Arguments != calls[0].Function.Arguments {
		t.Fatalf("non-streamed tool call %+v", resp.Choices[0].Message)
	}

	models, err := c.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != "gpt-sim" {
		t.Fatalf("models %+v %v", models, err)
	}

	// Errors come back as the client's own error type with OpenAI's shape.
	_, err = c.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: "no-such-model", Messages: params.Messages})
	var apiErr *oa.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Fatalf("unknown model: %v", err)
	}
}

func TestChatCompletionsErrors(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"m"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cases := []struct {
		name   string
		body   string
		hdr    http.Header
		status int
		want   string
	}{
		{"not json", `{"model":`, nil, 400, "parse the JSON"},
		{"no model", `{"messages":[{"role":"user","content":"x"}]}`, nil, 400, "model"},
		{"no messages", `{"model":"m","messages":[]}`, nil, 400, "at least one message"},
		{"bad role", `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, nil, 400, "messages[0].role"},
		{"bad content", `{"model":"m","messages":[{"role":"user","content":5}]}`, nil, 400, "messages[0].content"},
		{"wrong type", `{"model":"m","messages":"hi"}`, nil, 400, "messages"},
		{"n=2", `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "n=1"},
		{"unknown model", `{"model":"other","messages":[{"role":"user","content":"x"}]}`, nil, 404, "does not exist"},
		{"bad priority", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, http.Header{"X-Semaq-Priority": {"urgent"}}, 400, "priority"},
		{"bad timeout", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, http.Header{"X-Semaq-Timeout": {"soon"}}, 400, "X-SemaQ-Timeout"},
		{"bad auth", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, http.Header{"Authorization": {"Basic x"}}, 401, "Bearer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.post(t, ctx, []byte(tc.body), tc.hdr)
			defer resp.Body.Close()
			var eb openai.ErrorBody
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &eb); err != nil || eb.Error == nil {
				t.Fatalf("body is not an OpenAI error: %s", raw)
			}
			if resp.StatusCode != tc.status || !strings.Contains(eb.Error.Message, tc.want) || eb.Error.Type == "" {
				t.Fatalf("status %d %s, want %d and %q", resp.StatusCode, raw, tc.status, tc.want)
			}
			if !bytes.Contains(raw, []byte(`"param":`)) || !bytes.Contains(raw, []byte(`"code":`)) {
				t.Fatalf("error object lacks param or code: %s", raw)
			}
		})
	}
}

// A queue nobody serves fills up: the next request is refused with 429,
// and one that waits past its deadline gets 504.
func TestChatCompletionsOverloadAndDeadline(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A worker that announces the model but never fetches.
	if _, err := e.c.AddQueue(ctx, semaq.QueueConfig{Name: semaq.InferQueue("busy"), Subjects: []string{semaq.InferSubject("busy")}, Storage: "memory", MaxMessages: 1}); err != nil {
		t.Fatal(err)
	}
	an, err := e.c.Announce(ctx, semaq.Agent{ID: "stuck", Intents: []string{semaq.InferIntent}, Capabilities: map[string]string{semaq.CapModels: "busy"}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Stop()

	first := make(chan *http.Response, 1)
	go func() {
		first <- e.post(t, ctx, chatBody("busy", "first", false, ""), http.Header{"X-Semaq-Timeout": {"1.5"}})
	}()
	waitFor(t, func() bool {
		info, err := e.c.QueueInfo(ctx, semaq.InferQueue("busy"))
		return err == nil && info.Status.Queued == 1
	})
	resp := e.post(t, ctx, chatBody("busy", "second", true, ""), nil)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !bytes.Contains(raw, []byte(`"rate_limit_error"`)) {
		t.Fatalf("second request: %d %s", resp.StatusCode, raw)
	}
	resp = <-first
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 504 || !bytes.Contains(raw, []byte(`"timeout`)) {
		t.Fatalf("first request: %d %s", resp.StatusCode, raw)
	}
	// The expired request left the queue.
	waitFor(t, func() bool {
		info, err := e.c.QueueInfo(ctx, semaq.InferQueue("busy"))
		return err == nil && info.Status.Queued == 0
	})
}

// The worker calls a real OpenAI-compatible HTTP server: the simulated
// model's own HTTP face, on a second server.
func TestWorkerWithHTTPUpstream(t *testing.T) {
	e := setup(t)
	m, _ := sim.New(sim.Config{Tokens: 30, Seed: 9})
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
			sim.Handler(m, "upstream-model").ServeHTTP(w, r) // the worker's health check
			return
		}
		calls.Add(1)
		if r.Header.Get("Authorization") != "Bearer up-key" {
			http.Error(w, `{"error":{"message":"bad key","type":"authentication_error"}}`, http.StatusUnauthorized)
			return
		}
		sim.Handler(m, "upstream-model").ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	e.startWorker(t, worker.Config{Upstream: up.URL + "/v1", APIKey: "up-key", Models: []string{"upstream-model"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := sim.Answer("user: via http", 30, 9)
	for _, stream := range []bool{true, false} {
		resp := e.post(t, ctx, chatBody("upstream-model", "via http", stream, ""), nil)
		var text string
		if stream {
			s := readStream(t, resp.Body)
			text = s.text
		} else {
			var out openai.ChatCompletion
			_ = json.NewDecoder(resp.Body).Decode(&out)
			text = *out.Choices[0].Message.Content
			if out.Usage.CompletionTokens != 30 {
				t.Fatalf("usage from the upstream not passed on: %+v", out.Usage)
			}
		}
		resp.Body.Close()
		if text != want {
			t.Fatalf("stream=%v: %q, want %q", stream, text, want)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("upstream called %d times", calls.Load())
	}

	// An upstream that refuses: the client gets a 502 naming it.
	e.startWorker(t, worker.Config{Upstream: up.URL + "/v1", APIKey: "wrong", Models: []string{"refusing"}})
	resp := e.post(t, ctx, chatBody("refusing", "x", true, ""), nil)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !bytes.Contains(raw, []byte("bad key")) || !bytes.Contains(raw, []byte(semaq.TokenErrUpstream)) {
		t.Fatalf("refused upstream: %d %s", resp.StatusCode, raw)
	}
}

// A client that disconnects cancels the request end to end: the
// upstream's request context ends.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	e := setup(t)
	started := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"first\"}}]}\n\n")
		w.(http.Flusher).Flush()
		started <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(15 * time.Second):
		}
	}))
	t.Cleanup(up.Close)
	rw := e.startWorker(t, worker.Config{Upstream: up.URL, Models: []string{"slow"}})

	ctx, cancel := context.WithCancel(context.Background())
	resp := e.post(t, ctx, chatBody("slow", "hang on", true, ""), nil)
	r := sse.NewReader(resp.Body, 0)
	ev, err := r.Next()
	if err != nil || !strings.Contains(ev.Data, `"first"`) {
		t.Fatalf("first event %q %v", ev.Data, err)
	}
	<-started
	cancel() // the client goes away
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client left")
	}
	waitFor(t, func() bool { return rw.w.Stats().Cancelled == 1 })
}

// A worker that dies holding a request: before its first token the
// request is retried on another worker and the client sees one clean
// answer; after it, the client gets the tokens so far, never twice, then
// an error event with code worker_lost.
func TestWorkerKilled(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const ackWait = 400 * time.Millisecond

	t.Run("before the first token: retried", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		a := e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"k1"}, AckWait: ackWait, Sim: sim.Config{TTFT: 3 * time.Second}})
		done := make(chan streamed, 1)
		go func() {
			resp := e.post(t, ctx, chatBody("k1", "retry me", true, ""), nil)
			defer resp.Body.Close()
			done <- readStream(t, resp.Body)
		}()
		waitFor(t, func() bool {
			info, err := e.c.QueueInfo(ctx, semaq.InferQueue("k1"))
			return err == nil && info.Status.Held == 1
		})
		a.kill()
		e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"k1"}, AckWait: ackWait, Sim: sim.Config{Tokens: 12}})
		s := <-done
		if s.text != sim.Answer("user: retry me", 12, 0) || s.err != nil || !s.done {
			t.Fatalf("retried answer %q err %v", s.text, s.err)
		}
	})

	t.Run("mid-stream: error event", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		a := e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"k2"}, AckWait: ackWait, Sim: sim.Config{Tokens: 1000, TokensPerSec: 100}})
		resp := e.post(t, ctx, chatBody("k2", "kill me", true, ""), nil)
		defer resp.Body.Close()
		r := sse.NewReader(resp.Body, 0)
		var s streamed
		readEvents(t, r, &s, 5) // some tokens have arrived
		a.kill()
		b := e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"k2"}, AckWait: ackWait, Sim: sim.Config{Tokens: 1000}})
		readEvents(t, r, &s, -1)
		if s.err == nil || s.err.Code == nil || *s.err.Code != semaq.TokenErrWorkerLost || s.done {
			t.Fatalf("after the kill: err %+v done %v", s.err, s.done)
		}
		// What came is a prefix of the answer: no token twice, none lost
		// in between.
		full := sim.Answer("user: kill me", 1000, 0)
		if len(s.text) < len(sim.FirstToken("user: kill me")) || !strings.HasPrefix(full, s.text) {
			t.Fatalf("the tokens received are not a prefix of the answer: %q", s.text)
		}
		if b.w.Stats().Lost != 1 {
			t.Fatalf("second worker stats %+v", b.w.Stats())
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The gateway's envelope: the tenant from the key map (a client's tenant
// header cannot override it), the priority, session and trace headers. The
// test is the worker here, answering through the token stream.
func TestGatewayEnvelope(t *testing.T) {
	srv := brokertest.Start(t, func(c *broker.Config) { c.GatewayAPIKeys = map[string]string{"key-a": "tenant-a"} })
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.Connect(t, srv)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.c.AddQueue(ctx, semaq.QueueConfig{Name: semaq.InferQueue("env/model"), Subjects: []string{semaq.InferSubject("env/model")}, Storage: "memory"}); err != nil {
		t.Fatal(err)
	}
	an, err := e.c.Announce(ctx, semaq.Agent{ID: "manual", Intents: []string{semaq.InferIntent}, Capabilities: map[string]string{semaq.CapModels: "env/model"}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Stop()

	for _, hdr := range []http.Header{nil, {"Authorization": {"Bearer other"}}} {
		resp := e.post(t, ctx, chatBody("env/model", "x", false, ""), hdr)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("key %v: status %d, want 401", hdr, resp.StatusCode)
		}
	}

	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	answer := make(chan *http.Response, 1)
	go func() {
		answer <- e.post(t, ctx, chatBody("env/model", "x", false, ""), http.Header{
			"Authorization": {"Bearer key-a"}, "X-Semaq-Tenant": {"spoofed"}, "X-Semaq-Priority": {"high"},
			"X-Semaq-Session": {"sess-1"}, "Traceparent": {tp}})
	}()
	jobs, err := e.c.Fetch(ctx, semaq.InferQueue("env/model"), client.FetchWait(10*time.Second))
	if err != nil || len(jobs) != 1 {
		t.Fatalf("fetch: %v %v", jobs, err)
	}
	job := jobs[0]
	env, err := semaq.Parse(job.Header, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if env.Tenant != "tenant-a" || env.Priority != semaq.PriorityHigh || env.Session != "sess-1" || env.Model != "env/model" ||
		!strings.HasPrefix(job.Header.Get(semaq.HdrTraceParent), "00-4bf92f3577b34da6a3ce929d0e0e4736-") || !strings.HasPrefix(job.ID, "chatcmpl-") {
		t.Fatalf("envelope %+v, traceparent %q, id %q", env, job.Header.Get(semaq.HdrTraceParent), job.ID)
	}
	w, err := job.OpenTokenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Write(ctx, "hand-made")
	if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
		t.Fatal(err)
	}
	_ = job.Ack(ctx)
	resp := <-answer
	defer resp.Body.Close()
	var out openai.ChatCompletion
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || *out.Choices[0].Message.Content != "hand-made" ||
		resp.Header.Get(semaq.HdrHTTPRequestID) != job.ID {
		t.Fatalf("answer %+v %v", out, err)
	}
}

// A request whose time runs out while a worker runs it: the client gets
// 504 (or, once streaming, an error event) and the worker stops.
func TestDeadlineWhileRunning(t *testing.T) {
	e := setup(t)
	rw := e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"slowpoke"}, Sim: sim.Config{TTFT: 3 * time.Second}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	resp := e.post(t, ctx, chatBody("slowpoke", "x", false, ""), http.Header{"X-Semaq-Timeout": {"300ms"}})
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || !bytes.Contains(raw, []byte(`"timeout_error"`)) {
		t.Fatalf("status %d %s", resp.StatusCode, raw)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("504 after %s, the timeout was 300ms", d)
	}
	waitFor(t, func() bool { return rw.w.Stats().Cancelled == 1 })

	resp = e.post(t, ctx, chatBody("slowpoke", "x", true, ""), http.Header{"X-Semaq-Timeout": {"0.3"}})
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("streamed: status %d %s (no token came, so the status can still say it)", resp.StatusCode, raw)
	}
}
