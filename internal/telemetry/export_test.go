package telemetry

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/tracevocab"
	"github.com/semaq/semaq/semaq"
)

// The broker starts its dispatch and token-stream spans itself, with the
// timestamps it measured; StartMessage serves only the tests, which use it
// to check the sampler and the export of a root span.

// StartMessage starts a span for work done on a stored message: a child
// of the trace context in its headers, or nothing recorded when it carries
// none and roots are not sampled. env's AI attributes and attrs are set.
func (t *Tracing) StartMessage(h nats.Header, name string, kind trace.SpanKind, env semaq.Envelope, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx := tracevocab.Extract(context.Background(), h)
	if t == nil || !trace.SpanContextFromContext(ctx).IsValid() && !t.StartsRoots() {
		return ctx, trace.SpanFromContext(ctx) // non-recording
	}
	ctx, span := t.Tracer().Start(ctx, name, trace.WithSpanKind(kind))
	if span.IsRecording() {
		span.SetAttributes(tracevocab.EnvelopeAttributes(env)...)
		span.SetAttributes(attrs...)
	}
	return ctx, span
}
