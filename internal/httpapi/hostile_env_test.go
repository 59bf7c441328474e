package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/httpapi"
)

// setupWith is setup with a handler of its own, built from opts, served by
// httpapi.NewServer on a LimitListener of maxConns: what startHTTP wires.
func setupWith(t *testing.T, payload, maxConns int, opts func(*httpapi.Options)) *env {
	t.Helper()
	srv := brokertest.Start(t, func(c *broker.Config) { c.MaxPayload = payload })
	c := brokertest.Connect(t, srv)
	brokertest.AddStream(t, c, "AI", "ai.>")
	return serveWith(t, c, payload, maxConns, opts)
}

func serveWith(t *testing.T, c *client.Client, payload, maxConns int, opts func(*httpapi.Options)) *env {
	t.Helper()
	o := httpapi.Options{Client: c, MaxBody: payload}
	if opts != nil {
		opts(&o)
	}
	h := httpapi.New(o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httpapi.NewServer(h, httpapi.ServerConfig{})
	hs.RegisterOnShutdown(h.CloseStreams)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(httpapi.LimitListener(ln, maxConns)) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hs.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return &env{
		base: "http://" + ln.Addr().String(),
		c:    c,
		hc:   &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
}

// doHost is do with the Host header set to host ("" keeps the address).
func (e *env) doHost(t *testing.T, method, path, host string, hdr http.Header, body []byte) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
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

// waitFor polls cond until it holds, failing the test after ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
}

// legit checks the broker still serves an ordinary client: a publish and
// a one-message event stream of it.
func (e *env) legit(t *testing.T) {
	t.Helper()
	a := wantAck(t, e.do(t, http.MethodPost, "/api/v1/publish/ai.legit", nil, []byte("still here")))
	events := e.subscribe(t, "/api/v1/subscribe/ai.legit?count=1&start_seq="+itoa(a.Seq), nil)
	if len(events) != 1 || events[0].id != itoa(a.Seq) {
		t.Fatalf("legit subscribe got %+v", events)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
