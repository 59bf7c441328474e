package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/telemetry/otlptest"
	"github.com/semaq/semaq/semaq"
)

// TestQueueMetricsAndDispatchSpan: a work queue's waiting requests show by
// tenant, priority and model while queued; dispatch records the wait and
// the end-to-end delivery latency; an expired request counts as dropped
// and dead-lettered; a traced request gets a dispatch span that the
// worker's span (Job.StartSpan) continues.
func TestQueueMetricsAndDispatchSpan(t *testing.T) {
	t.Parallel()
	rcv := otlptest.Start(t)
	s := brokertest.Start(t, func(cfg *broker.Config) { cfg.OTLPEndpoint = rcv.URL() })
	rec := tracetest.NewSpanRecorder()
	workerTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, s.ClientURL(), client.WithTracerProvider(workerTP))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addQueue(t, c, semaq.QueueConfig{Name: "Q"})

	const traceID = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
	req := []client.PublishOption{client.WithTenant("acme"), client.WithPriority(1), client.WithModel("llama3"), client.WithPromptTokens(100)}
	pubReq(t, c, "r1", append(req, client.WithTraceParent("00-"+traceID+"-0102030405060708-01"))...)
	pubReq(t, c, "r2", req...)
	pubReq(t, c, "late", client.WithInferenceTimeout(30*time.Millisecond))

	waitMetrics(t, s,
		`semaq_queue_messages{model="llama3",priority="1",tenant="acme"} 2`,
		`semaq_queue_prompt_tokens{model="llama3",priority="1",tenant="acme"} 200`,
		`semaq_queue_dropped_total{model="none",priority="4",reason="expired",tenant="none"} 1`,
		`semaq_dead_letters_total{reason="expired",stream="Q"} 1`,
	)
	if text := getMetrics(t, s); !strings.Contains(text, `semaq_queue_oldest_age_seconds{model="llama3",priority="1",tenant="acme"}`) {
		t.Error("no oldest age for the waiting requests")
	}

	jobs := fetch(t, c, "Q", client.FetchMax(10))
	if len(jobs) != 2 {
		t.Fatalf("fetched %d jobs, want 2", len(jobs))
	}
	for _, j := range jobs {
		_, span := j.StartSpan(ctx, "")
		span.End()
	}
	ackAll(t, jobs)
	text := waitMetrics(t, s,
		`semaq_queue_dispatched_total{model="llama3",priority="1",tenant="acme"} 2`,
		`semaq_queue_wait_seconds_count{model="llama3",priority="1",tenant="acme"} 2`,
		`semaq_delivery_latency_seconds_count{subject="infer.>"} 2`,
	)
	if strings.Contains(text, `semaq_queue_messages{model="llama3",priority="1",tenant="acme"} 2`) {
		t.Error("dispatched requests still counted as waiting")
	}

	if err := s.FlushTraces(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.WaitFor(t, 15*time.Second, func(sp []otlptest.Span) bool {
		return len(otlptest.Named(otlptest.Trace(sp, traceID), "dispatch")) == 1
	})
	dispatch := otlptest.Named(otlptest.Trace(spans, traceID), "dispatch")[0]
	ingress := otlptest.Named(otlptest.Trace(spans, traceID), "ingress")
	if len(ingress) != 1 || dispatch.ParentID != ingress[0].SpanID {
		t.Fatalf("dispatch span is not the ingress span's child:\n%s", otlptest.Format(otlptest.Trace(spans, traceID)))
	}
	if dispatch.Kind != "SPAN_KIND_PRODUCER" || dispatch.Attrs["semaq.tenant"] != "acme" || dispatch.Attrs["gen_ai.request.model"] != "llama3" {
		t.Errorf("dispatch span %+v", dispatch)
	}
	var worker int
	for _, sp := range rec.Ended() {
		if sp.SpanContext().TraceID().String() != traceID {
			continue
		}
		worker++
		if sp.Parent().SpanID().String() != dispatch.SpanID || sp.Name() != "process infer.llama" {
			t.Errorf("worker span %q has parent %s, want the dispatch span %s", sp.Name(), sp.Parent().SpanID(), dispatch.SpanID)
		}
	}
	if worker != 1 {
		t.Errorf("%d worker spans in the traced request's trace, want 1", worker)
	}
}
