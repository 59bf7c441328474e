package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/semaq"
)

// Observability: Prometheus metrics (internal/metrics) and OpenTelemetry
// traces (internal/telemetry) of the node. docs/metrics.md and
// docs/tracing.md are the user-facing contracts.

// startObservability makes the node's metrics and, with an OTLP endpoint,
// its tracer. It runs first in Start: every component after it may record.
func (s *Server) startObservability(ctx context.Context) error {
	s.metrics = metrics.New(metrics.Options{Version: Version})
	t, err := telemetry.New(ctx, telemetry.Config{
		Endpoint:       s.cfg.OTLPEndpoint,
		SampleRatio:    s.cfg.TraceSample,
		ServiceVersion: Version,
	})
	if err != nil {
		return fmt.Errorf("broker: tracing: %w", err)
	}
	s.tracing = t
	s.metrics.SetConsumerSource(s.consumerStats)
	s.metrics.AddQueueSource(queueSource{s}) // work queues (observe_dispatch.go)
	return nil
}

// observeIngress hands the metrics and tracer to the ingress.
func (s *Server) observeIngress() error {
	s.ingress.metrics = s.metrics
	s.ingress.tracing = s.tracing
	return s.ingress.lat.start(s.nc, s.egress, &s.ingress.acks)
}

// stopTracing exports the spans still buffered. It runs last in stop.
func (s *Server) stopTracing(ctx context.Context) error {
	return s.tracing.Shutdown(ctx)
}

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

// patternObs is what the ingress records against one subject pattern of a
// stream: its metrics handle and its id for sampled ack latency.
type patternObs struct {
	pattern string
	sm      *metrics.Subject
	id      int
}

// patternObs resolves the handles of pattern once, when the ingress starts
// serving it.
func (in *ingress) patternObs(pattern string) *patternObs {
	sm := in.metrics.Subject(pattern)
	return &patternObs{pattern: pattern, sm: sm, id: in.lat.id(sm)}
}

// msgObs follows one message through the ingress.
type msgObs struct {
	po   *patternObs
	ctx  context.Context
	span trace.Span // nil unless tracing is on
}

// begin starts the message's ingress span, a child of the publisher's
// traceparent.
func (o *msgObs) begin(in *ingress, m *nats.Msg, env semaq.Envelope) {
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

// rejected records a refusal in the metrics and on the span.
func (o *msgObs) rejected(e *semaq.APIError) {
	reason := rejectReason(e)
	o.po.sm.Rejected(reason)
	if o.span != nil {
		telemetry.Fail(o.span, reason, e)
	}
}

// accepted records a message handed to JetStream, and its prompt tokens.
func (o *msgObs) accepted(in *ingress, env *semaq.Envelope) {
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
	}
	return metrics.Other
}

// latencySampler times sampled messages from receipt to JetStream's ack:
// their reply subject is its own (prefix.<pattern id>.<unix nanos>.<the
// publisher's reply>), it observes the time and forwards the ack. It shares
// the ack router's sent/routed counters, so shutdown waits for these acks
// too.
type latencySampler struct {
	prefix string
	acks   *ackRouter

	mu      sync.Mutex
	ids     map[*metrics.Subject]int
	handles atomic.Pointer[[]*metrics.Subject] // by id; grows under mu
}

// Acks come in on nc and are forwarded on out (the egress connection).
func (l *latencySampler) start(nc, out *nats.Conn, acks *ackRouter) error {
	l.prefix = "_SQ_LAT." + nuid.Next() + "."
	l.acks = acks
	sub, err := nc.Subscribe(l.prefix+">", func(m *nats.Msg) { l.route(out, m) })
	if err != nil {
		return fmt.Errorf("ingress: latency subscription: %w", err)
	}
	if err := sub.SetPendingLimits(ingressPendingMsgs, ingressPendingBytes); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	return nil
}

// id numbers a pattern's handle for the reply subject; -1 when there is
// nothing to record (no metrics).
func (l *latencySampler) id(sm *metrics.Subject) int {
	if sm == nil {
		return -1
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if id, ok := l.ids[sm]; ok {
		return id
	}
	if l.ids == nil {
		l.ids = make(map[*metrics.Subject]int)
	}
	var cur []*metrics.Subject
	if p := l.handles.Load(); p != nil {
		cur = *p
	}
	next := append(cur[:len(cur):len(cur)], sm)
	l.handles.Store(&next)
	l.ids[sm] = len(cur)
	return len(cur)
}

// sample gives out a timed reply subject when this message is sampled,
// and reports whether it did. A failed publish undoes the count like any
// reply the ingress replaced. A mapped reply (_R_.…) is sampled too: the
// sampler forwards the ack from the egress connection.
func (l *latencySampler) sample(po *patternObs, out *nats.Msg, received time.Time) bool {
	if l.prefix == "" || po.id < 0 || out.Reply == "" || out.Reply[0] == '$' || !po.sm.Sample() {
		return false
	}
	out.Reply = l.prefix + strconv.Itoa(po.id) + "." + strconv.FormatInt(received.UnixNano(), 10) + "." + out.Reply
	l.acks.sent.Add(1)
	return true
}

func (l *latencySampler) route(nc *nats.Conn, m *nats.Msg) {
	defer l.acks.routed.Add(1)
	id, ts, reply, ok := parseLatencyAck(m.Subject, l.prefix)
	if !ok {
		return
	}
	// Headers too: a status reply (no responders) must reach the publisher
	// as one.
	_ = nc.PublishMsg(&nats.Msg{Subject: reply, Header: m.Header, Data: m.Data})
	if hs := l.handles.Load(); hs != nil && id < len(*hs) {
		(*hs)[id].IngressLatency(time.Since(time.Unix(0, ts)))
	}
}

// parseLatencyAck splits a sampled ack's subject: prefix, pattern id, unix
// nanos, the publisher's reply. The reply is never in a reserved ($)
// namespace: the broker forwards to it with the internal user's rights.
func parseLatencyAck(subject, prefix string) (id int, ts int64, reply string, ok bool) {
	rest, found := strings.CutPrefix(subject, prefix)
	if !found {
		return 0, 0, "", false
	}
	idS, rest, _ := strings.Cut(rest, ".")
	tsS, reply, _ := strings.Cut(rest, ".")
	id, err1 := strconv.Atoi(idS)
	ts, err2 := strconv.ParseInt(tsS, 10, 64)
	if err1 != nil || err2 != nil || id < 0 || ts <= 0 || reply == "" || strings.HasPrefix(reply, "$") {
		return 0, 0, "", false
	}
	return id, ts, reply, true
}

// recordDelivered records the time from a message's AI-Received to its delivery
// by the broker, against the stream pattern that captures subject.
func recordDelivered(pos []*patternObs, subject string, h nats.Header) {
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
func (s *Server) streamPatterns(name string) []*patternObs {
	if s.ingress == nil || s.metrics == nil {
		return nil
	}
	s.ingress.mu.Lock()
	st, ok := s.ingress.streams[name]
	var subjects []string
	if ok {
		subjects = st.subjects
	}
	s.ingress.mu.Unlock()
	out := make([]*patternObs, 0, len(subjects))
	for _, p := range subjects {
		out = append(out, &patternObs{pattern: p, sm: s.metrics.Subject(p), id: -1})
	}
	return out
}
