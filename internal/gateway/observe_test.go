package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/telemetry/otlptest"
	"github.com/semaq/semaq/internal/worker"
)

// scrape returns the node's GET /metrics once every want line is in it.
func scrape(t *testing.T, base string, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := string(b)
		var missing []string
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			return text
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /metrics lacks:\n  %s", strings.Join(missing, "\n  "))
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
}

// TestGatewayMetricsAndTrace: a streamed chat completion through the
// gateway and a worker is counted by endpoint, model and status, measured
// as a token stream, and traced from the caller's traceparent through the
// gateway, ingress, dispatch and token-stream spans.
func TestGatewayMetricsAndTrace(t *testing.T) {
	rcv := otlptest.Start(t)
	srv := brokertest.Start(t, func(cfg *broker.Config) { cfg.OTLPEndpoint = rcv.URL() })
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.Connect(t, srv)}
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-1"}, Sim: sim.Config{Tokens: 12, Seed: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const traceID = "0123456789abcdef0123456789abcdef"
	hdr := http.Header{"Traceparent": {"00-" + traceID + "-0123456789abcdef-01"}}
	resp := e.post(t, ctx, chatBody("sim-1", "hi", true, ""), hdr)
	s := readStream(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !s.done {
		t.Fatalf("status %d, stream %+v", resp.StatusCode, s)
	}
	resp = e.post(t, ctx, chatBody("no-such-model", "hi", false, ""), nil)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown model: status %d", resp.StatusCode)
	}

	scrape(t, e.base,
		`semaq_gateway_requests_total{code="200",endpoint="/v1/chat/completions",model="sim-1"} 1`,
		`semaq_gateway_requests_total{code="404",endpoint="/v1/chat/completions",model="no-such-model"} 1`,
		`semaq_gateway_request_duration_seconds_count{endpoint="/v1/chat/completions",model="sim-1"} 1`,
		`semaq_http_requests_total{code="200",route="POST /v1/chat/completions"} 1`,
		`semaq_token_stream_tokens_total{model="sim-1",tenant="none"} 12`,
		`semaq_token_stream_time_to_first_token_seconds_count{model="sim-1",tenant="none"} 1`,
		`semaq_token_streams_total{model="sim-1",outcome="done",tenant="none"} 1`,
	)

	if err := srv.FlushTraces(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.WaitFor(t, 15*time.Second, func(sp []otlptest.Span) bool {
		return len(otlptest.Named(otlptest.Trace(sp, traceID), "tokens")) == 1
	})
	tr := otlptest.Trace(spans, traceID)
	one := func(name string) otlptest.Span {
		t.Helper()
		got := otlptest.Named(tr, name)
		if len(got) != 1 {
			t.Fatalf("%d spans named %s, want 1:\n%s", len(got), name, otlptest.Format(tr))
		}
		return got[0]
	}
	gw, ingress, dispatch, tokens := one("chat"), one("ingress"), one("dispatch"), one("tokens")
	for _, link := range []struct {
		child  otlptest.Span
		parent string
	}{
		{gw, "0123456789abcdef"},
		{ingress, gw.SpanID},
		{dispatch, ingress.SpanID},
		{tokens, dispatch.SpanID},
	} {
		if link.child.ParentID != link.parent {
			t.Errorf("span %q has parent %s, want %s:\n%s", link.child.Name, link.child.ParentID, link.parent, otlptest.Format(tr))
		}
	}
	if gw.Attrs["gen_ai.request.model"] != "sim-1" || gw.Attrs["gen_ai.operation.name"] != "chat" || gw.Attrs["http.response.status_code"] != int64(200) {
		t.Errorf("gateway span %+v", gw)
	}
	if tokens.Attrs["gen_ai.usage.output_tokens"] != int64(12) {
		t.Errorf("tokens span %+v", tokens)
	}
}
