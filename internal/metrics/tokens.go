package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a token stream: the outcome label of semaq_token_streams_total.
const (
	StreamDone     = "done"     // the producer sent its final frame
	StreamError    = "error"    // the producer reported an error
	StreamCanceled = "canceled" // the reader or the producer went away
	StreamTimeout  = "timeout"  // no frame within the stream's idle limit
)

// TokenStream holds the pre-resolved metrics of one model and tenant's token
// streams. A nil *TokenStream records nothing.
type TokenStream struct {
	tokens prometheus.Counter
	ttft   prometheus.Observer
	tpot   prometheus.Observer
	rate   prometheus.Observer
	ended  *prometheus.CounterVec
	k      pair
}

// TokenStream returns the handle of model and tenant's token streams. Get
// it once per stream, then call Tokens per frame and Finished at the end.
func (m *Metrics) TokenStream(model, tenant string) *TokenStream {
	if m == nil {
		return nil
	}
	k := pair{m.models.value(model), m.tenants.value(tenant)}
	return m.tokHandles.get(k, func(k pair) *TokenStream {
		return &TokenStream{
			tokens: m.tokTotal.WithLabelValues(k.a, k.b),
			ttft:   m.tokTTFT.WithLabelValues(k.a, k.b),
			tpot:   m.tokTPOT.WithLabelValues(k.a, k.b),
			rate:   m.tokRate.WithLabelValues(k.a, k.b),
			ended:  m.tokStreams,
			k:      k,
		}
	})
}

// FirstToken records the time from the request to the stream's first token.
func (t *TokenStream) FirstToken(d time.Duration) {
	if t != nil {
		t.ttft.Observe(d.Seconds())
	}
}

// Tokens counts n output tokens relayed (one frame's worth).
func (t *TokenStream) Tokens(n int) {
	if t != nil && n > 0 {
		t.tokens.Add(float64(n))
	}
}

// Finished records a stream that ended with outcome (one of the Stream*
// constants) after relaying tokens output tokens; firstToken is when the
// first token arrived and total when the last did, both measured from the
// request. Time per output token and tokens per second are derived from
// them when there are tokens enough.
func (t *TokenStream) Finished(outcome string, tokens int, firstToken, total time.Duration) {
	if t == nil {
		return
	}
	switch outcome {
	case StreamDone, StreamError, StreamCanceled, StreamTimeout:
	default:
		outcome = Other
	}
	t.ended.WithLabelValues(t.k.a, t.k.b, outcome).Inc()
	if tokens > 1 && total > firstToken {
		t.tpot.Observe((total - firstToken).Seconds() / float64(tokens-1))
	}
	if tokens > 0 && total > 0 {
		t.rate.Observe(float64(tokens) / total.Seconds())
	}
}

// GatewayRequest records one finished gateway request: endpoint is the API
// path pattern (e.g. "/v1/chat/completions"), code the HTTP status.
func (m *Metrics) GatewayRequest(endpoint, model string, code int, d time.Duration) {
	if m == nil {
		return
	}
	e, mod := m.endpoints.value(endpoint), m.models.value(model)
	m.gwRequests.WithLabelValues(e, mod, codeLabel(code)).Inc()
	m.gwDuration.WithLabelValues(e, mod).Observe(d.Seconds())
}
