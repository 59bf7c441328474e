package client

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/tracevocab"
	"github.com/semaq/semaq/semaq"
)

// TracerName is the instrumentation name of the spans the SDK starts.
const TracerName = "github.com/semaq/semaq/client"

// Span attribute keys (docs/tracing.md). The gen_ai.* and messaging.*
// keys follow the OpenTelemetry semantic conventions; semaq.* are SemaQ's
// own, for envelope fields the conventions have no name for. The broker's
// spans use the same keys.
const (
	AttrModel         = tracevocab.AttrModel         // gen_ai.request.model
	AttrInputTokens   = tracevocab.AttrInputTokens   // gen_ai.usage.input_tokens
	AttrConversation  = tracevocab.AttrConversation  // gen_ai.conversation.id: AI-Session
	AttrMsgSystem     = tracevocab.AttrMsgSystem     // messaging.system
	AttrMsgDest       = tracevocab.AttrMsgDest       // messaging.destination.name
	AttrMsgID         = tracevocab.AttrMsgID         // messaging.message.id
	AttrMsgOperation  = tracevocab.AttrMsgOperation  // messaging.operation.type
	AttrTenant        = tracevocab.AttrTenant        // semaq.tenant
	AttrPriority      = tracevocab.AttrPriority      // semaq.priority
	AttrIntent        = tracevocab.AttrIntent        // semaq.intent
	AttrAdapter       = tracevocab.AttrAdapter       // semaq.adapter
	AttrStream        = tracevocab.AttrStream        // semaq.stream
	AttrStreamSeq     = tracevocab.AttrStreamSeq     // semaq.stream.seq
	AttrNumDelivered  = tracevocab.AttrNumDelivered  // semaq.delivery.count
	AttrOriginSubject = tracevocab.AttrOriginSubject // semaq.origin_subject
)

// ValidUTF8 returns s with invalid UTF-8 replaced: OTLP's protobuf
// encoding refuses such strings, and one in a span loses the whole batch
// the exporter sends. Subjects may hold any bytes; use it on them.
func ValidUTF8(s string) string { return tracevocab.ValidUTF8(s) }

// HeaderCarrier lets an OpenTelemetry propagator read and write the trace
// context of a NATS message's headers. NATS headers are case-sensitive; Get
// falls back to a case-insensitive match so "Traceparent" set by another
// client is found too.
type HeaderCarrier = tracevocab.HeaderCarrier

// ExtractTrace returns ctx carrying the remote span context of h's
// traceparent, or ctx unchanged when h has none (or an invalid one).
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	return tracevocab.Extract(ctx, h)
}

// InjectTrace writes the span context of ctx into h as traceparent (and
// tracestate), unless ctx has no valid span context.
func InjectTrace(ctx context.Context, h nats.Header) { tracevocab.Inject(ctx, h) }

// injectIfAbsent gives a message about to be published the trace context
// of ctx, unless the caller set a traceparent (or X-Trace-ID) already.
func injectIfAbsent(ctx context.Context, h nats.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	c := HeaderCarrier(h)
	if c.Get(semaq.HdrTraceParent) != "" || c.Get(semaq.AliasTraceID) != "" {
		return
	}
	tracevocab.Inject(ctx, h)
}

// EnvelopeAttributes are the span attributes of a message's envelope: the
// model, prompt tokens, tenant, priority, session, intent and adapter that
// are set.
func EnvelopeAttributes(env semaq.Envelope) []attribute.KeyValue {
	return tracevocab.EnvelopeAttributes(env)
}

// WithTracerProvider sets the OpenTelemetry tracer provider of the spans
// Msg.StartSpan and Job.StartSpan start; the default is the global one
// (otel.SetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *connectOptions) error {
		if tp == nil {
			return errors.New("client: WithTracerProvider: nil provider")
		}
		o.tracerProvider = tp
		return nil
	}
}

func (c *Client) tracer() trace.Tracer {
	tp := c.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// TraceContext returns ctx carrying the message's trace context: the span
// the broker's ingress recorded for it, so work done for the message joins
// the publisher's trace.
func (m *Msg) TraceContext(ctx context.Context) context.Context {
	return ExtractTrace(ctx, m.Header)
}

// StartSpan starts a consumer span for processing the message, a child of
// the message's trace context, with its envelope (model, prompt tokens,
// tenant, priority...) and stream position as attributes. End the span
// when the work is done; publish results with the returned context and
// they carry the trace on. A name of "" means "process <subject>".
func (m *Msg) StartSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return startSpan(ctx, m.c, m.Header, m.Subject, name, opts,
		AttrStream.String(m.Stream), AttrStreamSeq.Int64(int64(m.Seq)), AttrNumDelivered.Int64(int64(m.NumDelivered)))
}

// TraceContext returns ctx carrying the job's trace context: the broker's
// dispatch span, so work done for the request joins the caller's trace.
func (j *Job) TraceContext(ctx context.Context) context.Context {
	return ExtractTrace(ctx, j.Header)
}

// StartSpan starts a consumer span for working on the job, a child of the
// broker's dispatch span, with the request's envelope, queue and position
// as attributes. A name of "" means "process <subject>".
func (j *Job) StartSpan(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return startSpan(ctx, j.c, j.Header, j.Subject, name, opts,
		AttrStream.String(j.Queue), AttrStreamSeq.Int64(int64(j.Seq)), AttrNumDelivered.Int64(int64(j.Deliveries)))
}

func startSpan(ctx context.Context, c *Client, h nats.Header, subject, name string, opts []trace.SpanStartOption, pos ...attribute.KeyValue) (context.Context, trace.Span) {
	subject = ValidUTF8(subject)
	if name == "" {
		name = "process " + subject
	}
	attrs := append([]attribute.KeyValue{
		AttrMsgSystem.String("nats"), AttrMsgDest.String(subject), AttrMsgOperation.String("process"),
	}, pos...)
	if env, err := semaq.Parse(h, time.Now()); err == nil {
		attrs = append(attrs, EnvelopeAttributes(env)...)
	}
	if o := HeaderCarrier(h).Get(semaq.HdrOriginSubject); o != "" {
		attrs = append(attrs, AttrOriginSubject.String(ValidUTF8(o)))
	}
	opts = append([]trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}, opts...)
	tr := otel.GetTracerProvider().Tracer(TracerName)
	if c != nil {
		tr = c.tracer()
	}
	return tr.Start(ExtractTrace(ctx, h), name, opts...)
}
