// Package tracevocab is the tracing vocabulary the SDK and the broker
// share: the span attribute keys of a message's envelope, and the W3C
// trace context carried in NATS headers. It is a leaf: it imports neither
// the SDK nor any part of the broker, so both can use it. The SDK exports
// these names as its own (client.AttrModel, client.ExtractTrace...).
package tracevocab

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/semaq"
)

// Span attribute keys (docs/tracing.md). The gen_ai.* and messaging.*
// keys follow the OpenTelemetry semantic conventions; semaq.* are SemaQ's
// own, for envelope fields the conventions have no name for.
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

// Extract returns ctx carrying the remote span context of h's
// traceparent, or ctx unchanged when h has none (or an invalid one).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// Inject writes the span context of ctx into h as traceparent (and
// tracestate), unless ctx has no valid span context.
func Inject(ctx context.Context, h nats.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagator.Inject(ctx, HeaderCarrier(h))
	}
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
