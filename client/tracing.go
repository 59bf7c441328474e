package client

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/semaq"
)

// TracerName is the instrumentation name of the spans the SDK starts.
const TracerName = "github.com/semaq/semaq/client"

// Span attribute keys. The gen_ai.* and messaging.* keys follow the
// OpenTelemetry semantic conventions; semaq.* are SemaQ's own, for envelope
// fields the conventions have no name for.
const (
	AttrModel         = attribute.Key("gen_ai.request.model")
	AttrInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	AttrConversation  = attribute.Key("gen_ai.conversation.id") // AI-Session
	AttrMsgSystem     = attribute.Key("messaging.system")
	AttrMsgDest       = attribute.Key("messaging.destination.name")
	AttrMsgID         = attribute.Key("messaging.message.id")
	AttrMsgOperation  = attribute.Key("messaging.operation.type")
	AttrTenant        = attribute.Key("semaq.tenant")
	AttrPriority      = attribute.Key("semaq.priority")
	AttrIntent        = attribute.Key("semaq.intent")
	AttrAdapter       = attribute.Key("semaq.adapter")
	AttrStream        = attribute.Key("semaq.stream")
	AttrStreamSeq     = attribute.Key("semaq.stream.seq")
	AttrNumDelivered  = attribute.Key("semaq.delivery.count")
	AttrOriginSubject = attribute.Key("semaq.origin_subject")
)

// ValidUTF8 returns s with invalid UTF-8 replaced: OTLP's protobuf
// encoding refuses such strings, and one in a span loses the whole batch
// the exporter sends. Subjects may hold any bytes; use it on them.
func ValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// propagator is W3C trace context, used whatever the global propagator is:
// the envelope's traceparent and tracestate headers are that format.
var propagator = propagation.TraceContext{}

// HeaderCarrier lets an OpenTelemetry propagator read and write the trace
// context of a NATS message's headers. NATS headers are case-sensitive; Get
// falls back to a case-insensitive match so "Traceparent" set by another
// client is found too.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set replaces the values of key.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// ExtractTrace returns ctx carrying the remote span context of h's
// traceparent, or ctx unchanged when h has none (or an invalid one).
func ExtractTrace(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// InjectTrace writes the span context of ctx into h as traceparent (and
// tracestate), unless ctx has no valid span context.
func InjectTrace(ctx context.Context, h nats.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagator.Inject(ctx, HeaderCarrier(h))
	}
}

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
	propagator.Inject(ctx, c)
}

// EnvelopeAttributes are the span attributes of a message's envelope: the
// model, prompt tokens, tenant, priority, session, intent and adapter that
// are set.
func EnvelopeAttributes(env semaq.Envelope) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 8)
	if env.Model != "" {
		attrs = append(attrs, AttrModel.String(env.Model))
	}
	if env.PromptTokens >= 0 {
		attrs = append(attrs, AttrInputTokens.Int(env.PromptTokens))
	}
	if env.Tenant != "" {
		attrs = append(attrs, AttrTenant.String(env.Tenant))
	}
	attrs = append(attrs, AttrPriority.Int(int(env.Priority)))
	if env.Session != "" {
		attrs = append(attrs, AttrConversation.String(env.Session))
	}
	if env.Intent != "" {
		attrs = append(attrs, AttrIntent.String(env.Intent))
	}
	if env.Adapter != "" {
		attrs = append(attrs, AttrAdapter.String(env.Adapter))
	}
	if env.MsgID != "" {
		attrs = append(attrs, AttrMsgID.String(env.MsgID))
	}
	return attrs
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
