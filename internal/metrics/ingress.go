package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reasons the ingress refuses a message: the reason label of
// semaq_ingress_rejected_total.
const (
	ReasonEnvelope       = "envelope"         // invalid envelope headers
	ReasonSchema         = "schema"           // payload does not match its schema
	ReasonSchemaNotFound = "schema_not_found" // bound schema not available
	ReasonNoStream       = "no_stream"        // a route's target has no stream
	ReasonTooLarge       = "too_large"        // over the server's max payload with its envelope
	ReasonUnavailable    = "unavailable"      // could not hand the message to JetStream
	ReasonOverloaded     = "overloaded"       // its work queue refused it (admission control)
	ReasonQuota          = "quota"            // over its tenant's or user's quota
)

var reasons = [...]string{ReasonEnvelope, ReasonSchema, ReasonSchemaNotFound, ReasonNoStream, ReasonTooLarge, ReasonUnavailable, ReasonOverloaded, ReasonQuota, ReasonPolicy, Other}

// Subject holds the pre-resolved metrics of one stream subject pattern, so
// the ingress records a message with no label lookup and no allocation.
// A nil *Subject records nothing.
type Subject struct {
	accepted  prometheus.Counter
	rejected  [len(reasons)]prometheus.Counter
	latency   prometheus.Observer
	delivery  prometheus.Observer
	every     uint64
	sampleSeq atomic.Uint64
}

// Subject returns the handle of a stream's capture pattern (e.g.
// "ai.inference.>"), the same handle for the same pattern.
func (m *Metrics) Subject(pattern string) *Subject {
	if m == nil {
		return nil
	}
	return m.subjectHandles.get(m.subjects.value(pattern), func(p string) *Subject {
		s := &Subject{
			accepted: m.accepted.WithLabelValues(p),
			latency:  m.ingressLatency.WithLabelValues(p),
			delivery: m.deliveryLatency.WithLabelValues(p),
			every:    uint64(m.opts.LatencySampleEvery),
		}
		for i, r := range reasons {
			s.rejected[i] = m.rejected.WithLabelValues(p, r)
		}
		return s
	})
}

// Accepted counts a message handed to JetStream.
func (s *Subject) Accepted() {
	if s != nil {
		s.accepted.Inc()
	}
}

// Rejected counts a refused message; reason is one of the Reason*
// constants (anything else counts as Other).
func (s *Subject) Rejected(reason string) {
	if s == nil {
		return
	}
	for i, r := range reasons {
		if r == reason {
			s.rejected[i].Inc()
			return
		}
	}
	s.rejected[len(reasons)-1].Inc()
}

// Sample reports whether this message should be timed to its ack: one in
// LatencySampleEvery.
func (s *Subject) Sample() bool {
	return s != nil && s.sampleSeq.Add(1)%s.every == 0
}

// IngressLatency records a sampled receive → JetStream-ack time.
func (s *Subject) IngressLatency(d time.Duration) {
	if s != nil {
		s.latency.Observe(d.Seconds())
	}
}

// Delivered records the time from AI-Received to the broker delivering the
// message to a consumer.
func (s *Subject) Delivered(d time.Duration) {
	if s != nil {
		s.delivery.Observe(d.Seconds())
	}
}

// PromptTokens records the AI-Prompt-Tokens of an accepted message. n < 0
// (not given) records nothing.
func (m *Metrics) PromptTokens(model, tenant string, n int) {
	if m == nil || n < 0 {
		return
	}
	k := pair{m.models.value(model), m.tenants.value(tenant)}
	m.promptHandles.get(k, func(k pair) prometheus.Observer {
		return m.promptTokens.WithLabelValues(k.a, k.b)
	}).Observe(float64(n))
}
