package broker

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/semaq/semaq/semaq"
)

// observeAudit registers the audit log's metrics (docs/metrics.md) and
// returns its two hooks: a record stored, by outcome; a record that could
// not be (it went to the log at error level instead).
func (s *Server) observeAudit() (written func(outcome string), failed func()) {
	records := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "semaq_audit_records_total",
		Help: "Audit records stored in SQ_AUDIT, by outcome of the admin change: ok or refused.",
	}, []string{"outcome"})
	failures := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "semaq_audit_write_failures_total",
		Help: "Audit records that could not be stored in SQ_AUDIT; each was logged at error level instead.",
	})
	// Both outcomes are shown from the start, at zero.
	records.WithLabelValues(semaq.AuditOK)
	records.WithLabelValues(semaq.AuditRefused)
	s.metrics.Registry().MustRegister(records, failures)
	return func(outcome string) {
		if outcome != semaq.AuditOK {
			outcome = semaq.AuditRefused
		}
		records.WithLabelValues(outcome).Inc()
	}, failures.Inc
}
