package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// modelMetrics are the model registry's families (docs/models.md). Model
// names go through the model label's limiter; versions are the
// registry's own (64 per model at most).
type modelMetrics struct {
	bound  *prometheus.CounterVec
	ops    *prometheus.CounterVec
	states *prometheus.GaugeVec
	mu     sync.Mutex // orders ModelStates' reset and set
}

func newModelMetrics(f factory) *modelMetrics {
	mm := &modelMetrics{
		bound: f.counter("semaq_model_requests_total",
			"Requests the ingress bound to a registered model's version at admission, by model and version.", "model", "version"),
		ops: f.counter("semaq_model_ops_total",
			"Model registry API calls, by operation and result (ok, gate_refused, conflict, not_found, bad, forbidden, error).", "op", "result"),
		states: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "semaq_model_version_state",
			Help: "1 for each registered model version in its lifecycle state (registered, canary, active, draining, retired)."},
			[]string{"model", "version", "state"}),
	}
	f.reg.MustRegister(mm.states)
	return mm
}

// ModelBound counts one request bound to model's version.
func (m *Metrics) ModelBound(model, version string) {
	if m != nil {
		m.registry.bound.WithLabelValues(m.models.value(model), version).Inc()
	}
}

// ModelOp counts one model registry call.
func (m *Metrics) ModelOp(op, result string) {
	if m != nil {
		m.registry.ops.WithLabelValues(op, result).Inc()
	}
}

// ModelStates replaces the version states shown.
func (m *Metrics) ModelStates(states map[[2]string]string) {
	if m == nil {
		return
	}
	m.registry.mu.Lock()
	defer m.registry.mu.Unlock()
	m.registry.states.Reset()
	for mv, st := range states {
		m.registry.states.WithLabelValues(m.models.value(mv[0]), mv[1], st).Set(1)
	}
}
