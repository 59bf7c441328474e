package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
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
	return h.serverSpan(ctx, "POST /api/v1/publish/{subject}", m.Header, client.AttrMsgDest.String(client.ValidUTF8(m.Subject)))
}

// serverSpan is publishSpan of a request named name whose trace headers
// are in hdr: hdr carries the span on.
func (h *Handler) serverSpan(ctx context.Context, name string, hdr nats.Header, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if h.opts.Tracing == nil {
		return ctx, nil
	}
	c := client.HeaderCarrier(hdr)
	if c.Get(semaq.AliasTraceID) != "" {
		return ctx, nil
	}
	if c.Get(semaq.HdrTraceParent) == "" && !h.opts.Tracing.StartsRoots() {
		return ctx, nil // nothing to continue and no new traces wanted
	}
	parent := client.ExtractTrace(ctx, hdr)
	if c.Get(semaq.HdrTraceParent) != "" && !trace.SpanContextFromContext(parent).IsValid() {
		return ctx, nil
	}
	ctx, span := h.opts.Tracing.Tracer().Start(parent, name,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(append([]attribute.KeyValue{client.AttrMsgSystem.String("nats"), client.AttrMsgOperation.String("send")}, attrs...)...))
	if span.IsRecording() {
		if env, err := semaq.Parse(hdr, time.Now()); err == nil {
			span.SetAttributes(client.EnvelopeAttributes(env)...)
		}
		delete(hdr, semaq.HdrTraceParent)
		delete(hdr, semaq.HdrTraceState)
		telemetry.CarryOn(ctx, span, hdr)
	}
	return ctx, span
}
