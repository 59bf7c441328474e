package worker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/logtest"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// start runs a worker on its own connection to a fresh broker and returns
// a client of that broker.
func start(t *testing.T, cfg worker.Config) *client.Client {
	t.Helper()
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	wc := brokertest.Connect(t, srv)
	w, err := worker.New(wc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- w.RunReady(ctx, func() { close(ready) }) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		done <- nil // for the cleanup
		t.Fatalf("worker stopped: %v", err)
	}
	return c
}

// ask publishes body for model straight onto its queue, as a NATS client
// that bypasses the gateway can, and returns how its token stream ended.
// opts replace the AI-Model header, when given.
func ask(t *testing.T, c *client.Client, model string, body []byte, opts ...client.PublishOption) (string, *semaq.TokenError) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	id := "chatcmpl-" + nuid.Next()
	rd, err := c.ReadTokens(ctx, id, client.WithLiveStart())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if len(opts) == 0 {
		opts = []client.PublishOption{client.WithModel(model)}
	}
	opts = append(opts, client.WithMsgID(id))
	if _, err := c.Publish(ctx, semaq.InferSubject(model), body, opts...); err != nil {
		t.Fatal(err)
	}
	res, err := rd.Collect(ctx)
	if err != nil {
		te, ok := errors.AsType[*semaq.TokenError](err)
		if !ok {
			t.Fatalf("token stream: %v", err)
		}
		return "", te
	}
	return res.Text, nil
}

type recorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  [][]byte
	auth []string
}

func newRecorder(t *testing.T, h http.Handler) *recorder {
	r := &recorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		if req.Method == http.MethodPost { // not the worker's health checks (GET /models)
			r.mu.Lock()
			r.got = append(r.got, b)
			r.auth = append(r.auth, req.Header.Get("Authorization"))
			r.mu.Unlock()
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) calls() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.got...)
}

// A request whose body names another model than the queue it came from
// (published over NATS, past the gateway) never reaches the upstream with
// the operator's key: the worker forwards only the model it serves.
func TestWorkerForwardsOnlyItsModel(t *testing.T) {
	m, _ := sim.New(sim.Config{Tokens: 4})
	up := newRecorder(t, sim.Handler(m, "cheap"))
	c := start(t, worker.Config{Upstream: up.srv.URL + "/v1", APIKey: "operator-key", Models: []string{"cheap"}})
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for name, tc := range map[string]struct {
		body string
		opts []client.PublishOption
	}{
		"other model in the body": {body: `{"model":"o1-pro-expensive",` + msgs + `}`},
		"case variant":            {body: `{"model":"cheap","Model":"o1-pro-expensive",` + msgs + `}`},
		"duplicate":               {body: `{"model":"cheap","model":"o1-pro-expensive",` + msgs + `}`},
		"other model header":      {body: `{"model":"cheap",` + msgs + `}`, opts: []client.PublishOption{client.WithHeader(semaq.HdrModel, "o1-pro-expensive")}},
	} {
		t.Run(name, func(t *testing.T) {
			_, te := ask(t, c, "cheap", []byte(tc.body), tc.opts...)
			if te == nil || te.Code != "bad_request" {
				t.Fatalf("token stream ended with %v, want bad_request", te)
			}
		})
	}
	if n := len(up.calls()); n != 0 {
		t.Fatalf("upstream called %d times: %q", n, up.calls())
	}
	text, te := ask(t, c, "cheap", []byte(`{"model":"cheap",`+msgs+`}`))
	if te != nil || text == "" {
		t.Fatalf("clean request: %q %v", text, te)
	}
	if got := up.calls(); len(got) != 1 || !bytes.Contains(got[0], []byte(`"model":"cheap"`)) {
		t.Fatalf("upstream got %q", got)
	}
}

// The upstream URL's password never reaches a log line or an error, and
// the error a client reads names neither the upstream's URL nor its host.
func TestUpstreamSecretsAndAddresses(t *testing.T) {
	t.Run("config errors", func(t *testing.T) {
		for _, u := range []string{"ftp://user:s3cret@host/v1", "http://user:s3cret@/v1", "http://user:s3cret@host:99999999999/%zz"} {
			cfg := worker.Config{Upstream: u, Models: []string{"m"}}
			err := cfg.Validate()
			if err == nil || strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("Validate(%s) = %v", u, err)
			}
		}
	})

	up := newRecorder(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		switch {
		case strings.Contains(string(must(io.ReadAll(r.Body))), "html"):
			w.WriteHeader(500)
			_, _ = io.WriteString(w, "<html>proxy error talking to http://"+host+"/internal/v1 (10.1.2.3)</html>")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"error":{"message":"context too long for http://`+host+`/v1/chat/completions","type":"invalid_request_error"}}`)
		}
	}))
	host := strings.TrimPrefix(up.srv.URL, "http://")
	upURL := "http://operator:s3cret@" + host + "/v1"
	logs := &logtest.Buffer{}
	c := start(t, worker.Config{Upstream: upURL, Models: []string{"m"}, Log: slog.New(slog.NewTextHandler(logs, nil))})
	msgs := `"messages":[{"role":"user","content":"html"}]`

	t.Run("upstream error page", func(t *testing.T) {
		_, te := ask(t, c, "m", []byte(`{"model":"m",`+msgs+`}`))
		if te == nil || te.Code != semaq.TokenErrUpstream || !strings.Contains(te.Message, "status 500") ||
			strings.Contains(te.Message, host) || strings.Contains(te.Message, "10.1.2.3") {
			t.Fatalf("client sees %+v", te)
		}
	})
	t.Run("upstream error naming its URL", func(t *testing.T) {
		_, te := ask(t, c, "m", []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
		if te == nil || !strings.Contains(te.Message, "status 400") || !strings.Contains(te.Message, "context too long") ||
			strings.Contains(te.Message, host) {
			t.Fatalf("client sees %+v", te)
		}
	})
	t.Run("upstream unreachable at start", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := ln.Addr().String()
		ln.Close()
		srv := brokertest.Start(t)
		w, err := worker.New(brokertest.Connect(t, srv), worker.Config{Upstream: "http://operator:s3cret@" + dead + "/v1", Models: []string{"gone"}})
		if err != nil {
			t.Fatal(err)
		}
		err = w.Run(context.Background())
		if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "operator:xxxxx@"+dead) {
			t.Fatalf("Run = %v", err)
		}
	})
	t.Run("upstream unreachable", func(t *testing.T) {
		// Gone after the worker started, before its next health check.
		live := httptest.NewServer(http.NotFoundHandler())
		dead := strings.TrimPrefix(live.URL, "http://")
		deadLogs := &logtest.Buffer{}
		c := start(t, worker.Config{Upstream: "http://operator:s3cret@" + dead + "/v1", Models: []string{"gone"},
			HealthInterval: time.Hour, Log: slog.New(slog.NewTextHandler(deadLogs, nil))})
		live.Close()
		_, te := ask(t, c, "gone", []byte(`{"model":"gone","messages":[{"role":"user","content":"x"}]}`))
		if te == nil || te.Code != semaq.TokenErrUpstream || strings.Contains(te.Message, dead) || strings.Contains(te.Message, "127.0.0.1") {
			t.Fatalf("client sees %+v", te)
		}
		if strings.Contains(deadLogs.String(), "s3cret") || !strings.Contains(deadLogs.String(), dead) {
			t.Fatalf("worker log (must name the upstream, without its password):\n%s", deadLogs)
		}
	})
	if strings.Contains(logs.String(), "s3cret") || !strings.Contains(logs.String(), "operator:xxxxx@"+host) {
		t.Fatalf("worker log:\n%s", logs)
	}
	if len(up.calls()) != 2 || up.auth[0] != "Basic "+"b3BlcmF0b3I6czNjcmV0" {
		// The userinfo still authenticates to the upstream.
		t.Fatalf("upstream calls %d, auth %q", len(up.calls()), up.auth)
	}
}

func must[T any](v T, _ error) T { return v }
