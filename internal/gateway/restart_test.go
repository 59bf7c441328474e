package gateway_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/logtest"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// answered posts a non-streamed request and reports whether it was answered.
func (e *env) answered(t *testing.T, model string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/v1/chat/completions", bytes.NewReader(chatBody(model, "heal", false, "")))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == 200
}

// A worker whose queue is deleted under it recreates it, saying so once,
// and serves again; it does not log the failure many times a second.
func TestWorkerRecreatesItsQueue(t *testing.T) {
	e := setup(t)
	logs := &logtest.Buffer{}
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"heal"}, Sim: sim.Config{Tokens: 3},
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !e.answered(t, "heal") {
		t.Fatal("not served before the delete")
	}
	if err := e.c.DeleteQueue(ctx, semaq.InferQueue("heal")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return logs.Lines("recreated") > 0 })
	waitFor(t, func() bool { return e.answered(t, "heal") })
	if n := logs.Lines("recreated"); n != 1 {
		t.Fatalf("%d recreate lines:\n%s", n, logs)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n > 3 {
		t.Fatalf("%d warnings after one lost queue:\n%s", n, logs)
	}
}

// A broker restart loses a memory queue: the running worker reconnects,
// recreates its queue and serves again, and /v1/models agrees with what
// the gateway accepts at every moment.
func TestWorkerHealsAfterBrokerRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: restarts the broker; runs without -short")
	}
	dir := t.TempDir()
	first := brokertest.Start(t, func(c *broker.Config) { c.DataDir = dir })
	natsAddr := hostPort(t, first.ClientURL())
	httpAddr := first.HTTPAddr()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, first.ClientURL(), client.WithNATSOptions(nats.ReconnectWait(20*time.Millisecond), nats.MaxReconnects(-1)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	logs := &logtest.Buffer{}
	w, err := worker.New(c, worker.Config{Upstream: "sim", Models: []string{"phoenix"}, Sim: sim.Config{Tokens: 3},
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- w.RunReady(runCtx, func() { close(ready) }) }()
	t.Cleanup(func() { stop(); <-done })
	<-ready
	e := &env{srv: first, base: "http://" + httpAddr}
	if !e.answered(t, "phoenix") {
		t.Fatal("not served before the restart")
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", logs)
		}
	})

	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	second := brokertest.Start(t, func(c *broker.Config) { c.DataDir, c.Listen, c.HTTP = dir, natsAddr, httpAddr })
	e = &env{srv: second, base: "http://" + httpAddr, c: brokertest.Connect(t, second)}
	waitFor(t, func() bool {
		// Listed means accepted: never a 404 for a model in the list.
		listed := e.modelListed(t, "phoenix")
		ok := e.answered(t, "phoenix")
		if listed && !ok {
			if _, err := e.c.QueueInfo(ctx, semaq.InferQueue("phoenix")); err != nil {
				t.Fatalf("/v1/models lists phoenix but its queue is gone: %v", err)
			}
		}
		return listed && ok
	})
	if n := logs.Lines("recreated"); n != 1 {
		t.Fatalf("%d recreate lines:\n%s", n, logs)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n > 5 {
		t.Fatalf("%d warnings over one restart:\n%s", n, logs)
	}
}

func (e *env) modelListed(t *testing.T, model string) bool {
	t.Helper()
	resp, err := http.Get(e.base + "/v1/models")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return bytes.Contains(b, []byte(`"id":"`+model+`"`))
}

func hostPort(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}
