package ingress

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/internal/tracevocab"
	"github.com/semaq/semaq/semaq"
)

// What the ingress records of each message: metrics against the stream
// pattern that took it, and a span of its own (docs/metrics.md,
// docs/tracing.md).

// pattern is what the ingress records against one subject pattern of a
// stream: its metrics handle and its id for sampled ack latency.
type pattern struct {
	pattern string
	sm      *metrics.Subject
	id      int
}

// pattern resolves the handles of p once, when the ingress starts serving
// it.
func (in *Ingress) pattern(p string) *pattern {
	sm := in.metrics.Subject(p)
	return &pattern{pattern: p, sm: sm, id: in.lat.id(sm)}
}

// msgObs follows one message through the ingress.
type msgObs struct {
	po   *pattern
	ctx  context.Context
	span trace.Span // nil unless tracing is on
}

// begin starts the message's ingress span, a child of the publisher's
// traceparent.
func (o *msgObs) begin(in *Ingress, m *nats.Msg, env semaq.Envelope) {
	if in.tracing == nil || env.TraceParent == "" && !in.tracing.StartsRoots() {
		return
	}
	o.ctx, o.span = in.tracing.StartIngress(m.Header, m.Subject, o.po.pattern, env)
}

// end closes the ingress span.
func (o *msgObs) end() {
	if o.span != nil {
		o.span.End()
	}
}

// noSpan is the span of a step run without one.
var noSpan = trace.SpanFromContext(context.Background())

// child starts the span of a step, named prefix+what, as a child of the
// message's span when that records; otherwise it returns the message's
// context (nil without a span) and a span that records nothing.
func (o *msgObs) child(t *telemetry.Tracing, prefix, what string) (context.Context, trace.Span) {
	if o.span == nil || !o.span.IsRecording() {
		return o.ctx, noSpan
	}
	return t.StartChild(o.ctx, prefix+tracevocab.ValidUTF8(what))
}

// endChild ends a step's span, with the step's refusal.
func endChild(sp trace.Span, e *semaq.APIError) {
	if sp == noSpan {
		return
	}
	if e != nil {
		telemetry.Fail(sp, rejectReason(e), e)
	}
	sp.End()
}

// rejected records a refusal in the metrics and on the span.
func (o *msgObs) rejected(e *semaq.APIError) {
	if o.po == nil {
		return
	}
	reason := rejectReason(e)
	o.po.sm.Rejected(reason)
	if o.span != nil {
		telemetry.Fail(o.span, reason, e)
	}
}

// accepted records a message handed to JetStream, and its prompt tokens.
func (o *msgObs) accepted(in *Ingress, env *semaq.Envelope) {
	o.po.sm.Accepted()
	in.metrics.PromptTokens(env.Model, env.Tenant, env.PromptTokens)
}

// carry writes the ingress span into the message about to be stored, so
// its consumers continue the trace from the broker's span.
func (o *msgObs) carry(h nats.Header) {
	if o.span != nil {
		telemetry.CarryOn(o.ctx, o.span, h)
	}
}

// rejectReason is the reason label a refusal is counted under.
func rejectReason(e *semaq.APIError) string {
	switch {
	case errors.Is(e, semaq.ErrEnvelope):
		return metrics.ReasonEnvelope
	case errors.Is(e, semaq.ErrSchema):
		return metrics.ReasonSchema
	case errors.Is(e, semaq.ErrSchemaNotFound):
		return metrics.ReasonSchemaNotFound
	case errors.Is(e, semaq.ErrNoStream):
		return metrics.ReasonNoStream
	case errors.Is(e, semaq.ErrTooLarge):
		return metrics.ReasonTooLarge
	case errors.Is(e, semaq.ErrUnavailable):
		return metrics.ReasonUnavailable
	case errors.Is(e, semaq.ErrOverloaded) && e.Quota != "":
		return metrics.ReasonQuota
	case errors.Is(e, semaq.ErrOverloaded):
		return metrics.ReasonOverloaded
	case errors.Is(e, semaq.ErrPolicy):
		return metrics.ReasonPolicy
	}
	return metrics.Other
}
