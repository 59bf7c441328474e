package broker

import (
	"context"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/semaq"
)

// Observability: Prometheus metrics (internal/metrics) and OpenTelemetry
// traces (internal/telemetry) of the node. docs/metrics.md and
// docs/tracing.md are the user-facing contracts.

// Metrics is the node's Prometheus metrics: components record on it, and
// the HTTP front door serves it at GET /metrics.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// Tracing is the node's tracer; nil when no OTLP endpoint is configured.
func (s *Server) Tracing() *telemetry.Tracing { return s.tracing }

// FlushTraces exports every finished span now (tests, before a shutdown
// the caller wants to observe).
func (s *Server) FlushTraces(ctx context.Context) error { return s.tracing.ForceFlush(ctx) }

// consumerStats reads every consumer of the account from the embedded
// server, in process: no request goes over NATS at scrape time.
func (s *Server) consumerStats() []metrics.ConsumerStat {
	if s.ns == nil || !s.ns.JetStreamEnabled() {
		return nil
	}
	acc, err := s.ns.JszAccount(&server.JSzOptions{
		Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true, Consumer: true, Config: true,
	})
	if err != nil || acc == nil {
		return nil
	}
	var out []metrics.ConsumerStat
	for _, st := range acc.Streams {
		for _, ci := range st.Consumer {
			if ci == nil {
				continue
			}
			out = append(out, metrics.ConsumerStat{
				Stream: st.Name, Consumer: ci.Name,
				Durable:     ci.Config != nil && ci.Config.Durable != "",
				Pending:     ci.NumPending,
				AckPending:  uint64(ci.NumAckPending),
				Redelivered: uint64(ci.NumRedelivered),
			})
		}
	}
	return out
}

// deliveredPattern is a stream pattern delivered messages are counted
// against.
type deliveredPattern struct {
	pattern string
	sm      *metrics.Subject
}

// recordDelivered records the time from a message's AI-Received to its delivery
// by the broker, against the stream pattern that captures subject.
func recordDelivered(pos []deliveredPattern, subject string, h nats.Header) {
	if len(pos) == 0 || h == nil {
		return
	}
	v := h[semaq.HdrReceived]
	if len(v) == 0 {
		return
	}
	at, err := time.Parse(time.RFC3339Nano, v[0])
	if err != nil {
		return
	}
	for _, po := range pos {
		if subjectMatches(po.pattern, subject) {
			po.sm.Delivered(time.Since(at))
			return
		}
	}
}

// streamPatterns resolves the pattern handles of stream name, for
// components that deliver its messages (filter pumps, dispatch).
func (s *Server) streamPatterns(name string) []deliveredPattern {
	if s.served == nil || s.metrics == nil {
		return nil
	}
	subjects := s.served.Subjects(name)
	out := make([]deliveredPattern, 0, len(subjects))
	for _, p := range subjects {
		out = append(out, deliveredPattern{pattern: p, sm: s.metrics.Subject(p)})
	}
	return out
}
