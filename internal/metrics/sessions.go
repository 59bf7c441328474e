package metrics

import "github.com/prometheus/client_golang/prometheus"

// sessionMetrics are the session store's families (docs/sessions.md):
// every label value is the store's own vocabulary, never a client's.
type sessionMetrics struct {
	ops         *prometheus.CounterVec
	transitions *prometheus.CounterVec
	activity    *prometheus.CounterVec
	watchers    prometheus.Gauge
}

func newSessionMetrics(f factory) sessionMetrics {
	sm := sessionMetrics{
		ops: f.counter("semaq_session_ops_total",
			"Session API calls, by operation and result (ok, conflict, not_found, bad, forbidden, error).", "op", "result"),
		transitions: f.counter("semaq_session_transitions_total",
			"Session freshness transitions, by state left (empty for a new session) and state entered.", "from", "to"),
		activity: f.counter("semaq_session_activity_writes_total",
			"Activity and confidence reports from messages carrying AI-Session, by what became of them: written, no_session, dropped, error.", "result"),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "semaq_session_watchers",
			Help: "Session deltas requests this node holds waiting for a change."}),
	}
	f.reg.MustRegister(sm.watchers)
	return sm
}

// SessionOp counts one session API call.
func (m *Metrics) SessionOp(op, result string) {
	if m != nil {
		m.sessions.ops.WithLabelValues(op, result).Inc()
	}
}

// SessionTransition counts one freshness transition.
func (m *Metrics) SessionTransition(from, to string) {
	if m != nil {
		m.sessions.transitions.WithLabelValues(from, to).Inc()
	}
}

// SessionActivity counts one activity flush or drop.
func (m *Metrics) SessionActivity(result string) {
	if m != nil {
		m.sessions.activity.WithLabelValues(result).Inc()
	}
}

// SessionWatchers moves the waiting watchers gauge by delta.
func (m *Metrics) SessionWatchers(delta int) {
	if m != nil {
		m.sessions.watchers.Add(float64(delta))
	}
}
