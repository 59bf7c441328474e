package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpx"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/semaq"
)

// serveObserved routes a request and records it in the metrics, by the
// route pattern that matched (never the raw path, whose subjects would
// make the label unbounded).
func (h *Handler) serveObserved(w http.ResponseWriter, r *http.Request) {
	if h.opts.Metrics == nil {
		h.route(w, r)
		return
	}
	start := time.Now()
	sw := &httpx.StatusWriter{ResponseWriter: w}
	pattern := h.route(sw, r)
	if pattern == "/" {
		pattern = "" // the catch-all: 404 or 405
	}
	code := sw.Status()
	h.opts.Metrics.HTTPRequest(pattern, code, time.Since(start))
}

// route authenticates r (with auth on) and serves it, returning the route
// pattern that matched.
func (h *Handler) route(w http.ResponseWriter, r *http.Request) string {
	if h.opts.Auth != nil {
		ar, release, ok := h.authorize(w, r)
		if !ok {
			_, pattern := h.mux.Handler(r)
			return pattern
		}
		defer release()
		r = ar
	}
	h.mux.ServeHTTP(w, r)
	return r.Pattern // set by the mux on r itself
}

// publishSpan starts the server span of an HTTP publish, continuing the
// request's traceparent, and makes the message carry the span on to the
// ingress. Without tracing it returns ctx and a nil span, and the
// forwarded traceparent reaches the ingress as it was sent. A request with
// an X-Trace-ID alias or an invalid traceparent is left alone too: the
// ingress judges those headers, as it does for NATS publishers.
func (h *Handler) publishSpan(ctx context.Context, m *nats.Msg) (context.Context, trace.Span) {
	if h.opts.Tracing == nil {
		return ctx, nil
	}
	c := client.HeaderCarrier(m.Header)
	if c.Get(semaq.AliasTraceID) != "" {
		return ctx, nil
	}
	if c.Get(semaq.HdrTraceParent) == "" && !h.opts.Tracing.StartsRoots() {
		return ctx, nil // nothing to continue and no new traces wanted
	}
	parent := client.ExtractTrace(ctx, m.Header)
	if c.Get(semaq.HdrTraceParent) != "" && !trace.SpanContextFromContext(parent).IsValid() {
		return ctx, nil
	}
	ctx, span := h.opts.Tracing.Tracer().Start(parent, "POST /api/v1/publish/{subject}",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(client.AttrMsgSystem.String("nats"), client.AttrMsgDest.String(client.ValidUTF8(m.Subject)),
			client.AttrMsgOperation.String("send")))
	if span.IsRecording() {
		if env, err := semaq.Parse(m.Header, time.Now()); err == nil {
			span.SetAttributes(client.EnvelopeAttributes(env)...)
		}
		delete(m.Header, semaq.HdrTraceParent)
		delete(m.Header, semaq.HdrTraceState)
		telemetry.CarryOn(ctx, span, m.Header)
	}
	return ctx, span
}
