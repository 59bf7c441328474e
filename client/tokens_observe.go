package client

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// WithStreamRequest ties the stream to the request it answers, for the
// broker's token-stream metrics (docs/metrics.md): the request's AI-Model
// and AI-Tenant label them, and its AI-Received is where time to first
// token is measured from (without it, from OpenTokenStream). Pass the
// request's headers (Job.Header, Msg.Header).
func WithStreamRequest(h nats.Header) TokenStreamOption {
	return func(o *tokenStreamOptions) error {
		c := HeaderCarrier(h)
		o.model, o.tenant = c.Get(semaq.HdrModel), c.Get(semaq.HdrTenant)
		if t, err := time.Parse(time.RFC3339Nano, c.Get(semaq.HdrReceived)); err == nil {
			o.start = t
		}
		return nil
	}
}

// measure puts the stream's timing and labels on its terminal record:
// the broker derives time to first token, time per output token and
// tokens per second from them.
func (w *TokenWriter) measure(h nats.Header) {
	w.mu.Lock()
	first := w.first
	w.mu.Unlock()
	if w.opts.model != "" {
		h.Set(semaq.HdrModel, w.opts.model)
	}
	if w.opts.tenant != "" {
		h.Set(semaq.HdrTenant, w.opts.tenant)
	}
	if !first.IsZero() {
		h.Set(semaq.HdrTokenFirst, first.Sub(w.opts.start).String())
	}
	h.Set(semaq.HdrTokenElapsed, time.Since(w.opts.start).String())
}
