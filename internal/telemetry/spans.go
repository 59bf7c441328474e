package telemetry

import (
	"context"
	"net/http"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/tracevocab"
	"github.com/semaq/semaq/semaq"
)

// Attribute keys of broker spans beyond the envelope's (tracevocab.Attr*,
// which the SDK shares).
const (
	AttrRoute       = attribute.Key("semaq.route")
	AttrRouteTarget = attribute.Key("semaq.route.target")
	AttrSchemaID    = attribute.Key("semaq.schema.id")
	AttrSubject     = attribute.Key("semaq.subject_pattern")
	AttrRejected    = attribute.Key("semaq.rejected.reason")
)

// StartIngress starts the ingress span of a message on pattern, a child of
// the publisher's traceparent in h (a root span when there is none). The
// span's attributes are the envelope's. Only sampled spans record; check
// span.IsRecording() before doing extra work for it.
func (t *Tracing) StartIngress(h nats.Header, subject, pattern string, env semaq.Envelope) (context.Context, trace.Span) {
	ctx := tracevocab.Extract(context.Background(), h)
	pattern = tracevocab.ValidUTF8(pattern)
	ctx, span := t.Tracer().Start(ctx, "ingress "+pattern, trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(tracevocab.AttrMsgSystem.String("nats"), tracevocab.AttrMsgDest.String(tracevocab.ValidUTF8(subject)),
			tracevocab.AttrMsgOperation.String("receive"), AttrSubject.String(pattern))
		span.SetAttributes(tracevocab.EnvelopeAttributes(env)...)
	}
	return ctx, span
}

// CarryOn writes span's context into h as the message's traceparent, so
// its consumers continue the trace from the broker's span. A span that does
// not record leaves h as it was: the publisher's context goes on unchanged.
func CarryOn(ctx context.Context, span trace.Span, h nats.Header) {
	if span.IsRecording() {
		tracevocab.Inject(ctx, h)
	}
}

// Fail marks span as failed with err's text and the rejection reason.
func Fail(span trace.Span, reason string, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(AttrRejected.String(reason))
	span.SetStatus(codes.Error, err.Error())
}

// StartChild starts a child span of ctx named name, internal kind.
func (t *Tracing) StartChild(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return t.Tracer().Start(ctx, name, trace.WithAttributes(attrs...))
}

// StartHTTP starts the server span of an HTTP request (the gateway's),
// continuing the request's traceparent. name should be low-cardinality:
// the route pattern, or the GenAI operation and model ("chat llama3").
func (t *Tracing) StartHTTP(r *http.Request, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	if t == nil || !trace.SpanContextFromContext(ctx).IsValid() && !t.StartsRoots() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return t.Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// GenAI attribute keys for the gateway's spans (OpenTelemetry GenAI
// semantic conventions); gen_ai.request.model and gen_ai.usage.input_tokens
// are tracevocab.AttrModel and tracevocab.AttrInputTokens.
const (
	AttrGenAIOperation   = attribute.Key("gen_ai.operation.name") // chat, text_completion, embeddings
	AttrGenAIOutputToken = attribute.Key("gen_ai.usage.output_tokens")
	AttrGenAIFinish      = attribute.Key("gen_ai.response.finish_reasons")
	AttrTimeToFirstToken = attribute.Key("semaq.time_to_first_token_ms")
	AttrTokenStream      = attribute.Key("semaq.token_stream.id") // the request id
)
