package telemetry_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/internal/telemetry/otlptest"
	"github.com/semaq/semaq/semaq"
)

func TestCheckEndpoint(t *testing.T) {
	for _, tc := range []struct {
		endpoint, says string
	}{
		{"http://127.0.0.1:4318", ""},
		{"https://collector.example/otlp/v1/traces", ""},
		{"grpc://collector:4317", "scheme must be http or https"},
		{"127.0.0.1:4318", "is not a URL like http://127.0.0.1:4318"},
		{"http://", "has no host"},
		{"http://[::1", "is not a URL"},
	} {
		err := telemetry.CheckEndpoint(tc.endpoint)
		if tc.says == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.endpoint, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: err %v, want one saying %q", tc.endpoint, err, tc.says)
		}
	}
}

func TestNewDisabledAndInvalid(t *testing.T) {
	ctx := context.Background()
	tr, err := telemetry.New(ctx, telemetry.Config{})
	if err != nil || tr != nil {
		t.Fatalf("no endpoint: %v, %v; want nil, nil", tr, err)
	}
	// A nil Tracing is usable everywhere.
	_, span := tr.StartIngress(nats.Header{}, "a.b", "a.>", semaq.Envelope{})
	span.End()
	if tr.StartsRoots() || tr.ForceFlush(ctx) != nil || tr.Shutdown(ctx) != nil {
		t.Error("a nil Tracing does something")
	}
	if _, err := telemetry.New(ctx, telemetry.Config{Endpoint: "http://x", SampleRatio: 2}); err == nil {
		t.Error("sample ratio 2 accepted")
	}
	if _, err := telemetry.New(ctx, telemetry.Config{Endpoint: "udp://x"}); err == nil {
		t.Error("udp endpoint accepted")
	}
}

// The exporter New builds reaches a collector given as a base URL, and the
// receiver decodes compressed requests too.
func TestExportToBaseURL(t *testing.T) {
	rcv := otlptest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tr, err := telemetry.New(ctx, telemetry.Config{Endpoint: rcv.URL(), ServiceVersion: "v-test"})
	if err != nil {
		t.Fatal(err)
	}
	h := nats.Header{semaq.HdrTraceParent: {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	env := semaq.Envelope{Model: "llama3", PromptTokens: 7, Tenant: "acme"}
	sctx, span := tr.StartIngress(h, "ai.x", "ai.>", env)
	telemetry.CarryOn(sctx, span, h)
	span.End()
	if got := h.Get(semaq.HdrTraceParent); !strings.HasPrefix(got, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || strings.Contains(got, "00f067aa0ba902b7") {
		t.Errorf("carried traceparent %q is not the ingress span of the same trace", got)
	}
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	gz, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(rcv.URL()+"/v1/traces"), otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	tr2, err := telemetry.New(ctx, telemetry.Config{Endpoint: rcv.URL(), Exporter: gz, SampleRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !tr2.StartsRoots() {
		t.Error("sample ratio 1 starts no roots")
	}
	_, root := tr2.StartMessage(nats.Header{}, "dispatch Q", trace.SpanKindProducer, env)
	root.End()
	if err := tr2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	spans := rcv.WaitFor(t, 10*time.Second, func(sp []otlptest.Span) bool { return len(sp) == 2 })
	ing, disp := otlptest.Named(spans, "ingress"), otlptest.Named(spans, "dispatch")
	if len(ing) != 1 || len(disp) != 1 {
		t.Fatalf("spans:\n%s", otlptest.Format(spans))
	}
	if ing[0].Service != "semaq" || ing[0].Attrs["gen_ai.request.model"] != "llama3" || ing[0].Attrs["gen_ai.usage.input_tokens"] != int64(7) ||
		ing[0].ParentID != "00f067aa0ba902b7" || ing[0].Kind != "SPAN_KIND_CONSUMER" {
		t.Errorf("ingress span %+v", ing[0])
	}
	if disp[0].ParentID != "" || disp[0].Kind != "SPAN_KIND_PRODUCER" {
		t.Errorf("root dispatch span %+v", disp[0])
	}
	if errs := rcv.Errors(); len(errs) > 0 {
		t.Errorf("receiver errors: %v", errs)
	}
}
