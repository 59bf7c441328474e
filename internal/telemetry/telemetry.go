// Package telemetry sets up OpenTelemetry tracing for a broker: a tracer
// provider exporting over OTLP/HTTP when an endpoint is configured, and
// helpers that start the broker's spans with their AI attributes and carry
// W3C trace context through NATS headers.
//
// A nil *Tracing is valid and does nothing, so call sites need no checks
// beyond the one they make to skip work on the hot path.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the service.name resource attribute of every span.
const ServiceName = "semaq"

// TracerName is the instrumentation name of the broker's spans.
const TracerName = "github.com/semaq/semaq/internal/broker"

// Config configures tracing.
type Config struct {
	// Endpoint is the OTLP/HTTP collector URL, e.g. http://127.0.0.1:4318;
	// a URL without a path sends to /v1/traces. Empty disables tracing.
	Endpoint string
	// SampleRatio is the fraction of requests arriving without a trace
	// context that start a trace (0..1). Requests with one follow its
	// sampled flag.
	SampleRatio float64
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// BatchTimeout bounds how long a finished span waits before export;
	// 0 means the SDK default (5s).
	BatchTimeout time.Duration
	// Exporter replaces the OTLP exporter (tests); Endpoint is then unused
	// but must still be set to enable tracing.
	Exporter sdktrace.SpanExporter
}

// CheckEndpoint validates an OTLP/HTTP endpoint URL, naming the problem.
func CheckEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("%q is not a URL like http://127.0.0.1:4318: %w", endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: the scheme must be http or https (OTLP/HTTP), not %q", endpoint, u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", endpoint)
	}
	return nil
}

// Tracing is the broker's tracer and its provider.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	roots  bool // whether requests without a trace context may start one
}

// New starts tracing, or returns nil when cfg.Endpoint is empty.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	if err := CheckEndpoint(cfg.Endpoint); err != nil {
		return nil, fmt.Errorf("otlp endpoint: %w", err)
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("trace sample ratio %g is outside 0..1", cfg.SampleRatio)
	}
	exp := cfg.Exporter
	if exp == nil {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(cfg.Endpoint)}
		if u, _ := url.Parse(cfg.Endpoint); u.Path == "" || u.Path == "/" {
			opts = append(opts, otlptracehttp.WithURLPath("/v1/traces"))
		}
		var err error
		// New does not connect: export failures are reported by the SDK
		// later, and never block the broker.
		if exp, err = otlptracehttp.New(ctx, opts...); err != nil {
			return nil, fmt.Errorf("otlp exporter: %w", err)
		}
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", ServiceName),
		attribute.String("service.version", cfg.ServiceVersion),
	)
	var bopts []sdktrace.BatchSpanProcessorOption
	if cfg.BatchTimeout > 0 {
		bopts = append(bopts, sdktrace.WithBatchTimeout(cfg.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithBatcher(exp, bopts...),
	)
	return &Tracing{tp: tp, tracer: tp.Tracer(TracerName), roots: cfg.SampleRatio > 0}, nil
}

// StartsRoots reports whether a message or request without a traceparent
// may start a trace. When it may not, callers skip span work for such
// messages altogether.
func (t *Tracing) StartsRoots() bool { return t != nil && t.roots }

// Tracer is the broker's tracer; a no-op one when t is nil.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer(TracerName)
	}
	return t.tracer
}

// ForceFlush exports every finished span now.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown exports what is left and stops the provider.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: %w", err)
	}
	return nil
}
