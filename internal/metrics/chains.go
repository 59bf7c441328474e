package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// chainMetrics are session chains' families (docs/provenance.md): the
// messages of streams with provenance or a strict session order.
type chainMetrics struct {
	stored  prometheus.Counter
	refused *prometheus.CounterVec
	retried prometheus.Counter
	queued  prometheus.Gauge
	settled prometheus.Counter
	answers *prometheus.CounterVec
}

func newChainMetrics(f factory) chainMetrics {
	cm := chainMetrics{
		stored: prometheus.NewCounter(prometheus.CounterOpts{Name: "semaq_chain_messages_stored_total",
			Help: "Messages of sessions stored with their chain (provenance links, strict order), on this node."}),
		refused: f.counter("semaq_chain_messages_refused_total",
			"Messages of sessions the chain refused or could not store, by error code (20160 out of order, 20162 busy, 10… JetStream's, 503 unavailable).", "code"),
		retried: prometheus.NewCounter(prometheus.CounterOpts{Name: "semaq_chain_batches_retried_total",
			Help: "Batches of a session built again on its head read anew: another node or a lost ack moved the head first."}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{Name: "semaq_chain_messages_waiting",
			Help: "Messages of sessions waiting for their chain: queued behind their session's batch in flight, or in it."}),
	}
	cm.settled = prometheus.NewCounter(prometheus.CounterOpts{Name: "semaq_chain_heads_settled_total",
		Help: "Head records written to settle a batch of a session whose messages were not all stored (a writer that died, a duplicate)."})
	cm.answers = f.counter("semaq_chain_answers_total",
		"Token-stream answers of requests in a session, by what became of their answer record (docs/provenance.md#answers): chained, duplicate (stored before), refused (the chain's stream refused it; not retried), failed (given up after retries), unbound (the stream ended before this node learnt its binding; recorded without the durable consumer).", "result")
	f.reg.MustRegister(cm.stored, cm.retried, cm.queued, cm.settled)
	return cm
}

// ChainQueued moves the gauge of messages waiting for their chain by d.
func (m *Metrics) ChainQueued(d int) {
	if m != nil {
		m.chain.queued.Add(float64(d))
	}
}

// ChainStored counts n messages stored with their chain.
func (m *Metrics) ChainStored(n int) {
	if m != nil {
		m.chain.stored.Add(float64(n))
	}
}

// ChainRefused counts a message the chain refused with code.
func (m *Metrics) ChainRefused(code uint16) {
	if m != nil {
		m.chain.refused.WithLabelValues(strconv.Itoa(int(code))).Inc()
	}
}

// ChainRetried counts a batch built again.
func (m *Metrics) ChainRetried() {
	if m != nil {
		m.chain.retried.Inc()
	}
}

// ChainSettled counts a head record written to settle a batch whose
// messages were not all stored.
func (m *Metrics) ChainSettled() {
	if m != nil {
		m.chain.settled.Inc()
	}
}

// ChainAnswer counts an answer record by result: chained, duplicate,
// refused, failed or unbound.
func (m *Metrics) ChainAnswer(result string) {
	if m != nil {
		m.chain.answers.WithLabelValues(result).Inc()
	}
}
