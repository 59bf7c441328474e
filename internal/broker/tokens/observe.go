package tokens

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/internal/tracevocab"
	"github.com/semaq/semaq/semaq"
)

// observeEnd measures a token stream from its terminal record, which
// the broker's relay stores anyway (one per stream): tokens relayed, outcome, and with the writer's
// SQ-Token-First / SQ-Token-Elapsed headers the time to first token, time
// per output token and tokens per second. A stream whose records carry a
// traceparent gets a span "tokens" covering the stream.
func (ts *Store) observeEnd(m *nats.Msg) {
	if ts.metrics == nil && ts.tracing == nil {
		return
	}
	c, err := semaq.ParseTokenChunk(m.Data)
	if err != nil || !c.Terminal() {
		return
	}
	tokens := int(c.Offset) + c.N
	// The writer's clock is not ours to trust: nonsense durations are
	// dropped, not recorded.
	first, _ := time.ParseDuration(m.Header.Get(semaq.HdrTokenFirst))
	total, _ := time.ParseDuration(m.Header.Get(semaq.HdrTokenElapsed))
	if total <= 0 || total > semaq.MaxTokenAge {
		total = 0
	}
	if first <= 0 || total > 0 && first > total || first > semaq.MaxTokenAge {
		first = 0
	}
	outcome := metrics.StreamDone
	if c.Error != nil {
		switch c.Error.Code {
		case semaq.TokenErrCancelled:
			outcome = metrics.StreamCanceled
		case semaq.TokenErrDeadline:
			outcome = metrics.StreamTimeout
		default:
			outcome = metrics.StreamError
		}
	}
	model, tenant := m.Header.Get(semaq.HdrModel), m.Header.Get(semaq.HdrTenant)
	sm := ts.metrics.TokenStream(model, tenant)
	sm.Tokens(tokens)
	if first > 0 {
		sm.FirstToken(first)
	}
	sm.Finished(outcome, tokens, first, total)

	if ts.tracing == nil || c.TraceParent == "" {
		return
	}
	ctx := tracevocab.Extract(context.Background(), nats.Header{semaq.HdrTraceParent: {c.TraceParent}})
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	end := time.Now()
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal), trace.WithTimestamp(end.Add(-total))}
	// The request id is the token before "end" ($SQ.TW.<id>.end).
	id := strings.TrimSuffix(m.Subject, ".end")
	id = id[strings.LastIndexByte(id, '.')+1:]
	_, span := ts.tracing.Tracer().Start(ctx, "tokens", opts...)
	if span.IsRecording() {
		span.SetAttributes(telemetry.AttrTokenStream.String(id))
		if model != "" {
			span.SetAttributes(tracevocab.AttrModel.String(tracevocab.ValidUTF8(model)))
		}
		if tenant != "" {
			span.SetAttributes(tracevocab.AttrTenant.String(tracevocab.ValidUTF8(tenant)))
		}
		span.SetAttributes(telemetry.AttrGenAIOutputToken.Int(tokens))
		if first > 0 {
			span.SetAttributes(telemetry.AttrTimeToFirstToken.Float64(float64(first) / float64(time.Millisecond)))
		}
		if c.Final != nil {
			span.SetAttributes(telemetry.AttrGenAIFinish.StringSlice([]string{c.Final.FinishReason}))
			if u := c.Final.Usage; u != nil && u.Prompt > 0 {
				span.SetAttributes(tracevocab.AttrInputTokens.Int(u.Prompt))
			}
		}
		if c.Error != nil {
			span.SetStatus(codes.Error, c.Error.Error())
		}
	}
	span.End(trace.WithTimestamp(end))
}
