package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/telemetry/otlptest"
	"github.com/semaq/semaq/semaq"
)

// getMetrics scrapes GET /metrics on the node's HTTP port.
func getMetrics(t *testing.T, s *broker.Server) string {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s: %s", resp.Status, b)
	}
	return string(b)
}

// waitMetrics scrapes until every line in want is in the output (some
// figures arrive asynchronously: sampled acks, dead letters), and returns
// the last scrape.
func waitMetrics(t *testing.T, s *broker.Server, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		text := getMetrics(t, s)
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
			var semaqLines []string
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(l, "semaq_") {
					semaqLines = append(semaqLines, l)
				}
			}
			t.Fatalf("GET /metrics lacks:\n  %s\nit has:\n%s", strings.Join(missing, "\n  "), strings.Join(semaqLines, "\n"))
		}
		<-tick.C
	}
}

// TestMetricsOfOneBroker drives each family the broker records itself
// through its front doors and reads them back from GET /metrics, which must
// pass the checks of promtool check metrics.
func TestMetricsOfOneBroker(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	brokertest.AddStream(t, c, "D", "d.>")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A lagging durable that never fetches: its pending is the stream.
	consumer(t, c, "AI", "lagging", 0)

	// 63 NATS publishes and one HTTP publish: two sampled ack latencies at
	// the default one in 32.
	for i := range 63 {
		publish(t, c, "ai.chat", fmt.Sprint(i), client.WithModel("llama3"), client.WithTenant("acme"), client.WithPromptTokens(100))
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr()+"/api/v1/publish/ai.chat", strings.NewReader("h"))
	req.Header.Set("AI-Model", "llama3")
	req.Header.Set("AI-Tenant", "acme")
	req.Header.Set("AI-Prompt-Tokens", "4000")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP publish: %s", resp.Status)
	}
	if _, err := c.Publish(ctx, "ai.chat", nil, client.WithHeader("AI-Priority", "urgent")); !errors.Is(err, semaq.ErrEnvelope) {
		t.Fatalf("bad priority: err = %v, want an envelope error", err)
	}

	// A filtered subscriber: the broker delivers, so it times the delivery.
	sub, err := c.Subscribe(ctx, "ai.chat", client.WithFilter(`tenant == "acme"`), client.WithMaxMessages(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if m := nextMsg(t, sub); m.Header.Get(semaq.HdrReceived) == "" {
		t.Fatal("delivered message has no AI-Received")
	}

	// A dead letter.
	publish(t, c, "d.x", "poison")
	term(t, consumer(t, c, "D", "W", 0), "bad input")

	text := waitMetrics(t, s,
		`semaq_ingress_messages_total{subject="ai.>"} 64`,
		`semaq_ingress_rejected_total{reason="envelope",subject="ai.>"} 1`,
		`semaq_ingress_latency_seconds_count{subject="ai.>"} 2`,
		`semaq_prompt_tokens_count{model="llama3",tenant="acme"} 64`,
		`semaq_prompt_tokens_sum{model="llama3",tenant="acme"} 10300`,
		`semaq_delivery_latency_seconds_count{subject="ai.>"} 1`,
		`semaq_consumer_pending_messages{consumer="lagging",stream="AI"} 64`,
		`semaq_consumer_ack_pending_messages{consumer="lagging",stream="AI"} 0`,
		`semaq_dead_letters_total{reason="terminated",stream="D"} 1`,
		`semaq_http_requests_total{code="200",route="POST /api/v1/publish/{subject}"} 1`,
		`semaq_build_info{version="`+broker.Version+`"} 1`,
		"go_goroutines ",
		"process_resident_memory_bytes ",
	)
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("the exposition does not parse: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// The scrape itself is a request like any other.
	waitMetrics(t, s, `semaq_http_requests_total{code="200",route="GET /metrics"}`)
}

// TestMetricsRedeliveries: a message delivered twice and not acked shows in
// semaq_consumer_redelivered_messages.
func TestMetricsRedeliveries(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "R", "r.>")
	publish(t, c, "r.x", "again")
	cons := consumer(t, c, "R", "slow", 0)
	if err := mustNext(t, cons).Nak(); err != nil {
		t.Fatal(err)
	}
	mustNext(t, cons) // the redelivery, left unacked
	waitMetrics(t, s,
		`semaq_consumer_redelivered_messages{consumer="slow",stream="R"} 1`,
		`semaq_consumer_ack_pending_messages{consumer="slow",stream="R"} 1`,
		`semaq_consumer_pending_messages{consumer="slow",stream="R"} 0`,
	)
}

// TestTraceTree follows one request end to end: an HTTP publish with a
// traceparent, the broker's HTTP, ingress and route spans, and a subscriber
// continuing the trace through the SDK helper, all exported over OTLP/HTTP
// to an in-process receiver.
func TestTraceTree(t *testing.T) {
	t.Parallel()
	rcv := otlptest.Start(t)
	s := brokertest.Start(t, func(cfg *broker.Config) { cfg.OTLPEndpoint = rcv.URL() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The worker's own tracer provider, exporting to the same receiver.
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(rcv.URL()+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	workerTP := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	t.Cleanup(func() { _ = workerTP.Shutdown(context.Background()) })
	c, err := client.Connect(ctx, s.ClientURL(), client.WithTracerProvider(workerTP))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokertest.AddStream(t, c, "AI", "ai.>")
	if _, err := c.AddRoute(ctx, semaq.Route{Name: "big-prompts", Subject: "ai.in", When: `prompt_tokens > 1000`, To: "ai.large"}); err != nil {
		t.Fatal(err)
	}

	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		callerID = "00f067aa0ba902b7"
	)
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr()+"/api/v1/publish/ai.in", strings.NewReader(`{"prompt":"hi"}`))
	req.Header.Set("traceparent", "00-"+traceID+"-"+callerID+"-01")
	req.Header.Set("AI-Model", "llama3-70b")
	req.Header.Set("AI-Tenant", "acme")
	req.Header.Set("AI-Prompt-Tokens", "4096")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %s: %s", resp.Status, body)
	}

	sub, err := c.Subscribe(ctx, "ai.large", client.WithMaxMessages(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m := nextMsg(t, sub)
	if !strings.Contains(m.Header.Get(semaq.HdrTraceParent), traceID) {
		t.Fatalf("stored traceparent %q is not of the caller's trace", m.Header.Get(semaq.HdrTraceParent))
	}
	_, span := m.StartSpan(ctx, "")
	span.End()
	if err := m.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushTraces(ctx); err != nil {
		t.Fatal(err)
	}
	if err := workerTP.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	spans := rcv.WaitFor(t, 15*time.Second, func(sp []otlptest.Span) bool {
		return len(otlptest.Named(otlptest.Trace(sp, traceID), "process")) > 0 &&
			len(otlptest.Named(otlptest.Trace(sp, traceID), "route")) > 0
	})
	tr := otlptest.Trace(spans, traceID)
	one := func(name string) otlptest.Span {
		t.Helper()
		got := otlptest.Named(tr, name)
		if len(got) != 1 {
			t.Fatalf("%d spans named %s in the trace, want 1:\n%s", len(got), name, otlptest.Format(tr))
		}
		return got[0]
	}
	httpSpan, ingress, route, process := one("POST"), one("ingress"), one("route"), one("process")

	for _, link := range []struct {
		child  otlptest.Span
		parent string
	}{
		{httpSpan, callerID},
		{ingress, httpSpan.SpanID},
		{route, ingress.SpanID},
		{process, ingress.SpanID},
	} {
		if link.child.ParentID != link.parent {
			t.Errorf("span %q has parent %s, want %s:\n%s", link.child.Name, link.child.ParentID, link.parent, otlptest.Format(tr))
		}
	}
	for _, sp := range []otlptest.Span{httpSpan, ingress, route} {
		if sp.Service != "semaq" {
			t.Errorf("span %q has service.name %q, want semaq", sp.Name, sp.Service)
		}
	}
	wantAttrs := func(sp otlptest.Span, want map[string]any) {
		t.Helper()
		for k, v := range want {
			if sp.Attrs[k] != v {
				t.Errorf("span %q: %s = %v (%T), want %v (%T)", sp.Name, k, sp.Attrs[k], sp.Attrs[k], v, v)
			}
		}
	}
	ai := map[string]any{"gen_ai.request.model": "llama3-70b", "gen_ai.usage.input_tokens": int64(4096), "semaq.tenant": "acme"}
	wantAttrs(ingress, ai)
	wantAttrs(ingress, map[string]any{"messaging.system": "nats", "semaq.subject_pattern": "ai.>",
		"semaq.origin_subject": "ai.in", "messaging.destination.name": "ai.large"})
	wantAttrs(route, map[string]any{"semaq.route": "big-prompts", "semaq.route.target": "ai.large"})
	wantAttrs(process, ai)
	wantAttrs(process, map[string]any{"messaging.destination.name": "ai.large", "semaq.stream": "AI", "semaq.origin_subject": "ai.in"})
	if process.Kind != "SPAN_KIND_CONSUMER" || httpSpan.Kind != "SPAN_KIND_SERVER" {
		t.Errorf("kinds: process %s, http %s", process.Kind, httpSpan.Kind)
	}
	if errs := rcv.Errors(); len(errs) > 0 {
		t.Errorf("receiver could not decode: %v", errs)
	}
}

// TestTraceNATSPublish: a NATS publisher's traceparent is the parent of the
// ingress span, a refused message's span says why, and a publish inside a
// span (SDK) carries that span without WithTraceParent.
func TestTraceNATSPublish(t *testing.T) {
	t.Parallel()
	rcv := otlptest.Start(t)
	s := brokertest.Start(t, func(cfg *broker.Config) { cfg.OTLPEndpoint = rcv.URL() })
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const traceID = "0af7651916cd43dd8448eb211c80319c"
	publish(t, c, "ai.x", "ok", client.WithTraceParent("00-"+traceID+"-b7ad6b7169203331-01"))
	_, err := c.Publish(ctx, "ai.x", nil, client.WithTraceParent("00-"+traceID+"-b7ad6b7169203332-01"), client.WithHeader("AI-Timeout", "soon"))
	if !errors.Is(err, semaq.ErrEnvelope) {
		t.Fatalf("bad timeout: %v", err)
	}
	// An unsampled caller: nothing recorded, and its traceparent is stored
	// as it was sent.
	const quiet = "00-11111111111111111111111111111111-2222222222222222-00"
	ack := publish(t, c, "ai.x", "quiet", client.WithTraceParent(quiet))

	// The SDK injects the span of ctx.
	workerTP := sdktrace.NewTracerProvider()
	pctx, parent := workerTP.Tracer("test").Start(ctx, "worker")
	publish2, err := c.Publish(pctx, "ai.x", []byte("from a span"))
	parent.End()
	if err != nil {
		t.Fatal(err)
	}

	if err := s.FlushTraces(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.WaitFor(t, 15*time.Second, func(sp []otlptest.Span) bool {
		return len(otlptest.Named(otlptest.Trace(sp, parent.SpanContext().TraceID().String()), "ingress")) == 1 &&
			len(otlptest.Named(otlptest.Trace(sp, traceID), "ingress")) == 1
	})
	ing := otlptest.Named(otlptest.Trace(spans, traceID), "ingress")[0]
	if ing.ParentID != "b7ad6b7169203331" || ing.StatusCode != "STATUS_CODE_UNSET" {
		t.Errorf("ingress span %+v, want parent b7ad6b7169203331 and no error", ing)
	}
	if got := otlptest.Trace(spans, "11111111111111111111111111111111"); len(got) != 0 {
		t.Errorf("an unsampled caller's trace was recorded: %s", otlptest.Format(got))
	}
	sdkIng := otlptest.Named(otlptest.Trace(spans, parent.SpanContext().TraceID().String()), "ingress")[0]
	if sdkIng.ParentID != parent.SpanContext().SpanID().String() {
		t.Errorf("SDK publish in a span: ingress parent %s, want %s", sdkIng.ParentID, parent.SpanContext().SpanID())
	}

	// The refusal happens before the span starts (the envelope is what
	// carries the trace); the quiet message keeps its traceparent.
	got, err := c.StreamInfo(ctx, "AI")
	if err != nil {
		t.Fatal(err)
	}
	if got.State.Messages != 3 {
		t.Errorf("stream holds %d messages, want 3", got.State.Messages)
	}
	sub, err := c.Subscribe(ctx, "ai.x", client.WithStartSequence(ack.Sequence), client.WithMaxMessages(2))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if m := nextMsg(t, sub); m.Header.Get(semaq.HdrTraceParent) != quiet {
		t.Errorf("unsampled traceparent stored as %q, want %q unchanged", m.Header.Get(semaq.HdrTraceParent), quiet)
	}
	m := nextMsg(t, sub)
	if m.Seq != publish2.Sequence || !strings.Contains(m.Header.Get(semaq.HdrTraceParent), parent.SpanContext().TraceID().String()) {
		t.Errorf("SDK publish stored traceparent %q, want trace %s", m.Header.Get(semaq.HdrTraceParent), parent.SpanContext().TraceID())
	}
}

// TestPublicUserCannotForgeAcks: the broker forwards the acks it receives
// on its sampled-latency and group-commit subjects with its own rights; a
// client publishing there is refused by the server.
func TestPublicUserCannotForgeAcks(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	denied := make(chan string, 4)
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		denied <- err.Error()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subj := range []string{"_SQ_LAT.x.0.1._INBOX.y", "_SQ_ACK.x._INBOX.y"} {
		if err := nc.Publish(subj, []byte("forged")); err != nil {
			t.Fatal(err)
		}
		select {
		case msg := <-denied:
			if !strings.Contains(strings.ToLower(msg), "permissions violation") || !strings.Contains(msg, subj) {
				t.Errorf("publish to %s: error %q, want a permissions violation", subj, msg)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("publish to %s was not refused", subj)
		}
	}
}

// TestTraceInvalidUTF8Subject: NATS subjects may hold any bytes, but the
// ingress stores only valid UTF-8 subjects: a publish to such a subject is
// refused before it is traced, and the spans around it are exported.
func TestTraceInvalidUTF8Subject(t *testing.T) {
	t.Parallel()
	rcv := otlptest.Start(t)
	s := brokertest.Start(t, func(cfg *broker.Config) { cfg.OTLPEndpoint = rcv.URL() })
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const bad, good = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2"
	_, err := c.Publish(ctx, "ai.caf\xe9", []byte("x"), client.WithTraceParent("00-"+bad+"-b7ad6b7169203331-01"))
	if err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("publish to an invalid UTF-8 subject: %v, want a refusal naming UTF-8", err)
	}
	publish(t, c, "ai.cafe", "x", client.WithTraceParent("00-"+good+"-b7ad6b7169203331-01"))
	if err := s.FlushTraces(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.WaitFor(t, 15*time.Second, func(sp []otlptest.Span) bool {
		return len(otlptest.Trace(sp, good)) == 1
	})
	if n := len(otlptest.Trace(spans, bad)); n != 0 {
		t.Errorf("%d spans of the refused publish, want none", n)
	}
	if errs := rcv.Errors(); len(errs) > 0 {
		t.Errorf("receiver errors: %v", errs)
	}
}
