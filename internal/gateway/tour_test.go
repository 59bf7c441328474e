package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/logtest"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

func (e *env) models(t *testing.T) []string {
	t.Helper()
	resp, err := http.Get(e.base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list openai.ModelList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range list.Data {
		out = append(out, m.ID)
	}
	return out
}

// The README tour: `queue add INFER --subjects 'ai.infer.>'` and then
// `worker --model llama3`. The worker uses INFER (which captures
// ai.infer.llama3) instead of failing to create INFER_llama3, takes only
// llama3's requests from it, and the gateway answers llama3.
func TestWorkerUsesSharedQueue(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.c.AddQueue(ctx, semaq.QueueConfig{Name: "INFER", Subjects: []string{"ai.infer.>"}, AffinityWait: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// A request for another model waits in INFER before the llama3 worker
	// starts: the worker must leave it there.
	if _, err := e.c.Publish(ctx, semaq.InferSubject("mistral"), chatBody("mistral", "other", false, ""),
		client.WithModel("mistral"), client.WithMsgID("chatcmpl-mistral-1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		qi, err := e.c.QueueInfo(ctx, "INFER")
		return err == nil && qi.Status.Queued == 1
	})

	llama := e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"llama3"}, Sim: sim.Config{Tokens: 5, Seed: 1}})
	if _, err := e.c.QueueInfo(ctx, semaq.InferQueue("llama3")); !errors.Is(err, semaq.ErrQueueNotFound) {
		t.Fatalf("the worker made a queue of its own beside INFER: %v", err)
	}
	resp := e.post(t, ctx, chatBody("llama3", "hi", true, ""), nil)
	s := readStream(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(s.text, "sum=") || !s.done {
		t.Fatalf("llama3: status %d, %+v", resp.StatusCode, s)
	}
	if got := e.models(t); len(got) != 1 || got[0] != "llama3" {
		t.Fatalf("models %v", got)
	}
	// The worker acks its job after the stream's last record, which the
	// gateway may have answered with already: wait for the ack.
	var qi *semaq.QueueInfo
	var err error
	waitFor(t, func() bool {
		qi, err = e.c.QueueInfo(ctx, "INFER")
		return err == nil && qi.Status.Held == 0
	})
	if qi.Status.Queued != 1 {
		t.Fatalf("the mistral request was taken by the llama3 worker: %+v", qi)
	}
	if st := llama.w.Stats(); st.Jobs != 1 || st.Failed != 0 {
		t.Fatalf("llama3 worker %+v", st)
	}

	// A mistral worker on the same queue takes it.
	mistral := e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"mistral"}, Sim: sim.Config{Tokens: 5, Seed: 1}})
	waitFor(t, func() bool { return mistral.w.Stats().Jobs == 1 })
	if got := e.models(t); len(got) != 2 {
		t.Fatalf("models %v", got)
	}
	if llama.w.Stats().Jobs != 1 {
		t.Fatalf("llama3 worker %+v", llama.w.Stats())
	}
}

// A plain stream that captures a model's subject (`stream add AI
// --subjects 'ai.>'`) is not a queue: the worker refuses to start and
// says which stream is in the way and what to do.
func TestWorkerRefusesPlainStream(t *testing.T) {
	e := setup(t)
	brokertest.AddStream(t, e.c, "AI", "ai.>")
	w, err := worker.New(e.c, worker.Config{Upstream: "sim", Models: []string{"llama3"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = w.Run(ctx)
	for _, want := range []string{"ai.infer.llama3", "stream AI", "not a queue"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Run = %v, want it to say %q", err, want)
		}
	}
}

// An upstream that does not answer at start stops the worker with an
// error naming it (without its password); one that stops answering later
// has its models withdrawn from the registry until it answers again, and
// each change is logged once.
func TestWorkerUpstreamHealth(t *testing.T) {
	e := setup(t)
	t.Run("dead at start", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		url := strings.Replace(dead.URL, "http://", "http://op:s3cret@", 1) + "/v1"
		dead.Close()
		w, err := worker.New(e.c, worker.Config{Upstream: url, Models: []string{"dead"}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = w.Run(ctx)
		if err == nil || !strings.Contains(err.Error(), "op:xxxxx@127.0.0.1") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("Run = %v", err)
		}
		if strings.Contains(err.Error(), "upstream: upstream") {
			t.Fatalf("doubled prefix: %v", err)
		}
	})
	t.Run("stops answering", func(t *testing.T) {
		var down atomic.Bool
		var checks atomic.Int64
		m, _ := sim.New(sim.Config{Tokens: 3})
		h := sim.Handler(m)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/models") {
				checks.Add(1)
			}
			if down.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(up.Close)
		var logs logtest.Buffer
		e.startWorker(t, worker.Config{Upstream: up.URL + "/v1", Models: []string{"flaky"}, HealthInterval: 20 * time.Millisecond,
			Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if got := e.models(t); len(got) != 1 {
			t.Fatalf("models %v", got)
		}
		down.Store(true)
		waitFor(t, func() bool { return len(e.models(t)) == 0 })
		n := checks.Load()
		waitFor(t, func() bool { return checks.Load() >= n+3 })
		if c := logs.Lines("upstream stopped answering"); c != 1 {
			t.Fatalf("%d lines say the upstream stopped:\n%s", c, logs.String())
		}
		down.Store(false)
		waitFor(t, func() bool { return len(e.models(t)) == 1 })
		if !e.answered(t, "flaky") {
			t.Fatal("not answered after the upstream came back")
		}
		if c := logs.Lines("upstream answers again"); c != 1 {
			t.Fatalf("%d lines say the upstream is back:\n%s", c, logs.String())
		}
	})
}

// A worker stopping says so, with the requests it still runs, and says
// when it has stopped.
func TestWorkerStoppingIsLogged(t *testing.T) {
	e := setup(t)
	var logs logtest.Buffer
	rw := e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"slow"}, Sim: sim.Config{Tokens: 4, TTFT: 300 * time.Millisecond},
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	answered := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/v1/chat/completions", strings.NewReader(string(chatBody("slow", "x", false, ""))))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	// Held by the broker is not yet running in the worker: wait for both,
	// so the stop begins with the request in flight.
	waitFor(t, func() bool {
		qi, err := e.c.QueueInfo(ctx, semaq.InferQueue("slow"))
		return err == nil && qi.Status.Held == 1 && rw.w.Stats().InFlight == 1
	})
	rw.stop()
	<-rw.done
	if code := <-answered; code != 200 {
		t.Fatalf("the request in flight ended with %d", code)
	}
	if logs.Lines("worker stopping") != 1 || logs.Lines("in_flight=1") != 1 || logs.Lines("worker stopped") != 1 {
		t.Fatalf("logs:\n%s", logs.String())
	}
}

// The OpenAI door answers the endpoints it does not serve, and a model it
// does not know, in OpenAI's error shape, and serves GET /v1/models/{id}.
func TestOpenAIDoorShapes(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"llama3", "org/model-7b"}})
	for _, tc := range []struct{ method, path string }{
		{"POST", "/v1/completions"},
		{"POST", "/v1/embeddings"},
		{"GET", "/v1/nothing/here"},
		{"DELETE", "/v1/files/x"},
	} {
		req, _ := http.NewRequest(tc.method, e.base+tc.path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body struct {
			Error map[string]any `json:"error"`
		}
		if resp.StatusCode != 404 || json.Unmarshal(raw, &body) != nil || body.Error["type"] != "invalid_request_error" ||
			body.Error["code"] != "unknown_url" || !strings.Contains(body.Error["message"].(string), tc.path) {
			t.Fatalf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, raw)
		}
		if p, ok := body.Error["param"]; !ok || p != nil {
			t.Fatalf("%s %s: param %v", tc.method, tc.path, p)
		}
	}
	for _, id := range []string{"llama3", "org/model-7b"} {
		resp, err := http.Get(e.base + "/v1/models/" + id)
		if err != nil {
			t.Fatal(err)
		}
		var m openai.Model
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || m.ID != id || m.Object != "model" || m.OwnedBy != "semaq" {
			t.Fatalf("model %s: %d %+v %v", id, resp.StatusCode, m, err)
		}
	}
	resp, err := http.Get(e.base + "/v1/models/ghost")
	if err != nil {
		t.Fatal(err)
	}
	oe := errorOf(t, resp)
	resp.Body.Close()
	if resp.StatusCode != 404 || oe.Code == nil || *oe.Code != "model_not_found" || oe.Type != openai.TypeInvalidRequest {
		t.Fatalf("ghost: %d %+v", resp.StatusCode, oe)
	}
}
