package gateway

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpx"
	"github.com/semaq/semaq/internal/telemetry"
)

// attrHTTPStatus is the OpenTelemetry HTTP semantic convention's key.
const attrHTTPStatus = attribute.Key("http.response.status_code")

// observed wraps an endpoint with the gateway's metrics
// (semaq_gateway_requests_total, semaq_gateway_request_duration_seconds)
// and its server span. The span's context replaces the request's
// traceparent, so the request published on the client's behalf continues
// the trace from it. The handler names the model with noteModel once it
// knows it.
func (g *Gateway) observed(endpoint, operation string, h http.HandlerFunc) http.HandlerFunc {
	if g.o.Metrics == nil && g.o.Tracing == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		obs := &requestObs{}
		ctx, span := g.o.Tracing.StartHTTP(r, operation+" "+endpoint,
			telemetry.AttrGenAIOperation.String(operation))
		if span.IsRecording() {
			propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(r.Header))
		}
		sw := &httpx.StatusWriter{ResponseWriter: w}
		h(sw, r.WithContext(context.WithValue(ctx, requestObsKey{}, obs)))
		code := sw.Status()
		g.o.Metrics.GatewayRequest(endpoint, obs.model, code, time.Since(start))
		if span.IsRecording() {
			if obs.model != "" {
				span.SetAttributes(client.AttrModel.String(obs.model))
			}
			span.SetAttributes(attrHTTPStatus.Int(code))
			if code >= 500 {
				span.SetStatus(codes.Error, http.StatusText(code))
			}
		}
		span.End()
	}
}

// requestObs is what a handler tells observed about its request.
type requestObs struct{ model string }

type requestObsKey struct{}

// noteModel names the model of the request ctx belongs to, for the
// metrics' model label and the span's gen_ai.request.model.
func noteModel(ctx context.Context, model string) {
	if o, ok := ctx.Value(requestObsKey{}).(*requestObs); ok {
		o.model = model
	}
}
