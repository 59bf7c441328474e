// Package metrics is SemaQ's Prometheus instrumentation: one Metrics per
// broker on its own registry, with typed methods the write path, the
// dispatcher, token streams and the gateway call per event, and collectors
// that read queue and consumer state when Prometheus scrapes.
//
// Every label whose values come from outside (subjects, models, tenants,
// streams, consumers, gateway endpoints) goes through a cap: the first N
// distinct values are kept, later ones are reported as "other" and counted
// in semaq_metrics_label_overflow_total. Subjects are a stream's capture
// patterns, never the literal subjects published to. docs/metrics.md lists
// every family with its labels and caps.
//
// Methods are safe for concurrent use. A nil *Metrics, and every nil handle
// it returns, is valid and records nothing, so components work unchanged
// without metrics.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Label values used when the real one cannot be given.
const (
	// Other replaces a value past its label's cap.
	Other = "other"
	// None stands for an empty value (a message without AI-Tenant, say).
	None = "none"
)

// Default caps: distinct values kept per label before "other".
const (
	DefaultMaxSubjects  = 100
	DefaultMaxStreams   = 100
	DefaultMaxModels    = 25
	DefaultMaxTenants   = 50
	DefaultMaxConsumers = 200
	DefaultMaxEndpoints = 20
	// DefaultLatencySampleEvery is how often (one message in N per subject
	// pattern) the ingress times a message to its JetStream ack.
	DefaultLatencySampleEvery = 32
)

// Options configures New. Zero fields take the defaults above.
type Options struct {
	// Version is reported in semaq_build_info.
	Version string
	// Caps on distinct label values.
	MaxSubjects, MaxStreams, MaxModels, MaxTenants, MaxConsumers, MaxEndpoints int
	// LatencySampleEvery: the ingress times one message in N per subject
	// pattern from receipt to JetStream's ack. 1 times every message.
	LatencySampleEvery int
	// NoRuntime leaves out the Go runtime and process collectors.
	NoRuntime bool
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.MaxSubjects, DefaultMaxSubjects)
	def(&o.MaxStreams, DefaultMaxStreams)
	def(&o.MaxModels, DefaultMaxModels)
	def(&o.MaxTenants, DefaultMaxTenants)
	def(&o.MaxConsumers, DefaultMaxConsumers)
	def(&o.MaxEndpoints, DefaultMaxEndpoints)
	def(&o.LatencySampleEvery, DefaultLatencySampleEvery)
}

// Metrics holds every SemaQ metric family of one broker.
type Metrics struct {
	opts Options
	reg  *prometheus.Registry

	// Label caps, and the children resolved per capped value.
	overflow                                      *prometheus.CounterVec
	subjects, streams, models, tenants, endpoints *limiter
	subjectHandles                                cache[string, *Subject]
	promptHandles                                 cache[pair, prometheus.Observer]
	httpHandles                                   cache[pair, prometheus.Counter]
	queueHandles                                  cache[queueKey, *Queue]
	tokHandles                                    cache[pair, *TokenStream]

	// Write path and delivery.
	accepted, rejected                            *prometheus.CounterVec
	ingressLatency, deliveryLatency, promptTokens *prometheus.HistogramVec
	deadLetters                                   *prometheus.CounterVec
	dlqAdvisoriesRefused                          *prometheus.CounterVec
	jsGuardRefused                                *prometheus.CounterVec
	authFailures                                  *prometheus.CounterVec
	auditRecords                                  *prometheus.CounterVec
	auditFailures                                 prometheus.Counter
	quotaRefusals                                 *prometheus.CounterVec // quota.go
	memoryRefusals                                prometheus.Counter     // memory.go
	policySteps                                   *prometheus.CounterVec // policy.go
	sessions                                      sessionMetrics         // sessions.go
	registry                                      *modelMetrics          // models.go
	policy                                        policyMetrics          // policies.go
	batch                                         batchMetrics           // batches.go
	chain                                         chainMetrics           // chains.go

	// HTTP front door and gateway.
	httpRequests, gwRequests *prometheus.CounterVec
	httpDuration, gwDuration *prometheus.HistogramVec
	gwSessionRounds          *prometheus.CounterVec // gateway.go

	// Dispatch queues and token streams.
	queueWait                     *prometheus.HistogramVec
	queueDispatched, queueDropped *prometheus.CounterVec
	queueSources                  sources[QueueStatsSource]
	tokTotal, tokStreams          *prometheus.CounterVec
	tokTTFT, tokTPOT, tokRate     *prometheus.HistogramVec

	// consumerFn, guarded by consumerMu, reads JetStream consumers at scrape time.
	consumerMu sync.Mutex
	consumerFn func() []ConsumerStat
}

// Buckets shared by the latency families: 100µs to about 13s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0001, 2, 18)

// New makes the metrics of one broker on a registry of their own, so several
// brokers in one process (tests) do not collide.
func New(o Options) *Metrics {
	o.defaults()
	m := &Metrics{opts: o, reg: prometheus.NewRegistry()}
	f := factory{reg: m.reg}
	m.overflow = f.counter("semaq_metrics_label_overflow_total",
		"Label values reported as \"other\" because their label reached its cap.", "label")
	m.subjects = newLimiter("subject", o.MaxSubjects, m.overflow)
	m.streams = newLimiter("stream", o.MaxStreams, m.overflow)
	m.models = newLimiter("model", o.MaxModels, m.overflow)
	m.tenants = newLimiter("tenant", o.MaxTenants, m.overflow)
	m.endpoints = newLimiter("endpoint", o.MaxEndpoints, m.overflow)

	m.accepted = f.counter("semaq_ingress_messages_total",
		"Messages the ingress accepted and handed to JetStream, by stream subject pattern.", "subject")
	m.rejected = f.counter("semaq_ingress_rejected_total",
		"Messages the ingress refused, by stream subject pattern and reason.", "subject", "reason")
	m.ingressLatency = f.histogram("semaq_ingress_latency_seconds",
		"Time from the ingress receiving a message to JetStream's ack, sampled, by stream subject pattern.", latencyBuckets, "subject")
	m.deliveryLatency = f.histogram("semaq_delivery_latency_seconds",
		"Time from AI-Received to delivery of a message by the broker (filtered subscriptions, dispatch), by stream subject pattern.", latencyBuckets, "subject")
	m.promptTokens = f.histogram("semaq_prompt_tokens",
		"AI-Prompt-Tokens of accepted messages, by model and tenant.", prometheus.ExponentialBuckets(16, 2, 17), "model", "tenant")
	m.deadLetters = f.counter("semaq_dead_letters_total",
		"Messages dead-lettered into SQ_DLQ, by stream and reason.", "stream", "reason")
	m.dlqAdvisoriesRefused = f.counter("semaq_dlq_advisories_refused_total",
		"Dead-letter advisories not acted on, by reason: not_advisory (a reply subject or headers: JetStream delivered it on someone's behalf), unconfirmed (JetStream's consumer does not confirm it).", "reason")
	m.jsGuardRefused = f.counter("semaq_jetstream_calls_refused_total",
		"JetStream API calls of users refused by the broker before JetStream saw them, by reason: deliver_subject (a push consumer delivering outside its maker's inbox), not_imported (a call that did not come through a user account's import).", "reason")
	m.authFailures = f.counter("semaq_auth_failures_total",
		"NATS connections and routes refused by authentication, by reason: nkey, no_key, bad_key, unknown_key, cert, route_settings, route_secret.", "reason")
	m.auditRecords = f.counter("semaq_audit_records_total",
		"Audit records stored in SQ_AUDIT, by outcome of the admin change: ok or refused.", "outcome")
	m.auditRecords.WithLabelValues("ok")
	m.auditRecords.WithLabelValues("refused")
	m.auditFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "semaq_audit_write_failures_total",
		Help: "Audit records that could not be stored in SQ_AUDIT; each was logged at error level instead."})
	m.reg.MustRegister(m.auditFailures)
	m.sessions = newSessionMetrics(f)
	m.registry = newModelMetrics(f)
	m.policy = newPolicyMetrics(f)
	m.batch = newBatchMetrics(f)
	m.chain = newChainMetrics(f)
	m.policySteps = f.counter("semaq_policy_verdicts_total",
		"Verdicts of the ingress's policy steps on published messages, by step and verdict: pass, rewrite, refuse (docs/policy.md).", "step", "verdict")
	m.memoryRefusals = prometheus.NewCounter(prometheus.CounterOpts{Name: "semaq_memory_refusals_total",
		Help: "Publishes the ingress refused because the node's memory was past 90% of max_memory."})
	m.reg.MustRegister(m.memoryRefusals)
	m.quotaRefusals = f.counter("semaq_quota_refusals_total",
		"Messages refused by a quota, by tenant, quota (rpm, tpm, max_queued_tokens) and scope (tenant, user).", "tenant", "quota", "scope")
	m.httpRequests = f.counter("semaq_http_requests_total",
		"HTTP front door requests, by route pattern and status code.", "route", "code")
	m.httpDuration = f.histogram("semaq_http_request_duration_seconds",
		"HTTP front door request duration, by route pattern (event streams count until they end).", latencyBuckets, "route")
	m.queueWait = f.histogram("semaq_queue_wait_seconds",
		"Time a message waited in a dispatch queue before dispatch, by tenant, priority and model.", latencyBuckets, "tenant", "priority", "model")
	m.queueDispatched = f.counter("semaq_queue_dispatched_total",
		"Messages dispatched from a dispatch queue, by tenant, priority and model.", "tenant", "priority", "model")
	m.queueDropped = f.counter("semaq_queue_dropped_total",
		"Messages that left a dispatch queue without dispatch, by tenant, priority, model and reason.", "tenant", "priority", "model", "reason")
	m.tokTotal = f.counter("semaq_token_stream_tokens_total",
		"Output tokens relayed on token streams, by model and tenant; rate() gives tokens per second.", "model", "tenant")
	m.tokStreams = f.counter("semaq_token_streams_total",
		"Token streams that ended, by model, tenant and outcome.", "model", "tenant", "outcome")
	m.tokTTFT = f.histogram("semaq_token_stream_time_to_first_token_seconds",
		"Time from a token stream's request to its first token, by model and tenant.", latencyBuckets, "model", "tenant")
	m.tokTPOT = f.histogram("semaq_token_stream_time_per_output_token_seconds",
		"Mean time between output tokens after the first, per stream, by model and tenant.", prometheus.ExponentialBuckets(0.0005, 2, 14), "model", "tenant")
	m.tokRate = f.histogram("semaq_token_stream_output_tokens_per_second",
		"Output tokens per second of one finished stream, by model and tenant.", prometheus.ExponentialBuckets(1, 2, 14), "model", "tenant")
	m.gwRequests = f.counter("semaq_gateway_requests_total",
		"OpenAI-compatible gateway requests, by endpoint, model and status code.", "endpoint", "model", "code")
	m.gwDuration = f.histogram("semaq_gateway_request_duration_seconds",
		"OpenAI-compatible gateway request duration, by endpoint and model.", latencyBuckets, "endpoint", "model")
	m.gwSessionRounds = f.counter("semaq_gateway_session_rounds_total",
		"Answers the OpenAI-compatible gateway kept as a round of their session (X-SemaQ-Session), by outcome: stored, failed (each failure is logged).", "outcome")
	m.gwSessionRounds.WithLabelValues(SessionRoundStored)
	m.gwSessionRounds.WithLabelValues(SessionRoundFailed)

	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "semaq_build_info",
			Help:        "Always 1; the version label says which SemaQ runs.",
			ConstLabels: prometheus.Labels{"version": o.Version},
		}, func() float64 { return 1 }),
		queueCollector{m},
		consumerCollector{m},
	)
	if !o.NoRuntime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry is the registry the metrics live on; tests gather from it and
// other components may register collectors of their own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text (or OpenMetrics)
// format, for GET /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:          m.reg, // counts scrape errors in promhttp_metric_handler_errors_total
		EnableOpenMetrics: true,
		ErrorHandling:     promhttp.ContinueOnError,
	})
}

// JetStreamRefused counts one JetStream API call refused by the broker's
// guard: reason is deliver_subject or not_imported.
func (m *Metrics) JetStreamRefused(reason string) {
	if m == nil {
		return
	}
	switch reason {
	case "deliver_subject", "not_imported":
	default:
		reason = Other
	}
	m.jsGuardRefused.WithLabelValues(reason).Inc()
}

// DLQAdvisoryRefused counts one dead-letter advisory not acted on: reason
// is not_advisory or unconfirmed.
func (m *Metrics) DLQAdvisoryRefused(reason string) {
	if m == nil {
		return
	}
	switch reason {
	case "not_advisory", "unconfirmed":
	default:
		reason = Other
	}
	m.dlqAdvisoriesRefused.WithLabelValues(reason).Inc()
}

// DeadLetter counts one message dead-lettered from stream. reason is
// "max_deliveries", "terminated" or "expired" (a "terminated: <why>"
// reason counts as terminated: the why is free text).
func (m *Metrics) DeadLetter(stream, reason string) {
	if m == nil {
		return
	}
	if i := indexByte(reason, ':'); i >= 0 {
		reason = reason[:i]
	}
	switch reason {
	case "max_deliveries", "terminated", "expired":
	default:
		reason = Other
	}
	m.deadLetters.WithLabelValues(m.streams.value(stream), reason).Inc()
}

// AuthFailure counts one NATS connection or HTTP request refused by
// authentication.
func (m *Metrics) AuthFailure(reason string) {
	if m == nil {
		return
	}
	switch reason {
	case "nkey", "no_key", "bad_key", "unknown_key", "expired_key", "cert", "route_settings", "route_secret":
	default:
		reason = Other
	}
	m.authFailures.WithLabelValues(reason).Inc()
}

// AuditRecord counts one audit record stored; outcome is "ok" or
// "refused" (anything else counts as refused).
func (m *Metrics) AuditRecord(outcome string) {
	if m == nil {
		return
	}
	if outcome != "ok" {
		outcome = "refused"
	}
	m.auditRecords.WithLabelValues(outcome).Inc()
}

// AuditWriteFailure counts one audit record that could not be stored.
func (m *Metrics) AuditWriteFailure() {
	if m == nil {
		return
	}
	m.auditFailures.Inc()
}

// HTTPRequest records one finished HTTP request. route is the matched
// ServeMux pattern ("" for none).
func (m *Metrics) HTTPRequest(route string, code int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	c := m.httpHandles.get(pair{route, codeLabel(code)}, func(k pair) prometheus.Counter {
		return m.httpRequests.WithLabelValues(k.a, k.b)
	})
	c.Inc()
	m.httpDuration.WithLabelValues(route).Observe(d.Seconds())
}

// codeLabel is an HTTP status as a label; nonsense codes are "other".
func codeLabel(code int) string {
	if code < 100 || code > 599 {
		return Other
	}
	return strconv.Itoa(code)
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// factory registers families on one registry.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string, labels ...string) *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(v)
	return v
}

func (f factory) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(v)
	return v
}
