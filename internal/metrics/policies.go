package metrics

import "github.com/prometheus/client_golang/prometheus"

// policyMetrics are the policy rules' and plugins' families (docs/policy.md,
// docs/plugins.md). Labels are rule and plugin names (an admin's), entity
// types and actions (the broker's vocabulary): never a value found.
type policyMetrics struct {
	findings     *prometheus.CounterVec
	actions      *prometheus.CounterVec
	vault        *prometheus.CounterVec
	held         prometheus.Histogram
	pluginCalls  *prometheus.CounterVec
	pluginTime   *prometheus.HistogramVec
	pluginActive *prometheus.GaugeVec
}

func newPolicyMetrics(f factory) policyMetrics {
	pm := policyMetrics{
		findings: f.counter("semaq_policy_findings_total",
			"Entities and content matches policy rules found, by rule, where (ingress, tokens) and type (an entity type, or content).", "policy", "stage", "type"),
		actions: f.counter("semaq_policy_actions_total",
			"What policy rules did to messages and token streams, by rule, where and action: mask, hash, tokenize, block, stop, flag.", "policy", "stage", "action"),
		vault: f.counter("semaq_pii_vault_ops_total",
			"PII vault operations, by operation (tokenize, restore) and result (ok, not_found, forbidden, error).", "op", "result"),
		held: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "semaq_policy_token_held_bytes",
			Help:    "Bytes of token-stream text a policy held back after each record, waiting for what follows to decide a match.",
			Buckets: []float64{0, 4, 16, 32, 64, 128, 256, 512}}),
		pluginCalls: f.counter("semaq_plugin_calls_total",
			"Plugin calls, by plugin, stage and result: ok, reject, trap, timeout, memory, bad_output, disabled.", "plugin", "stage", "result"),
		pluginTime: f.histogram("semaq_plugin_call_seconds",
			"Duration of plugin calls, by plugin.", []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .05}, "plugin"),
		pluginActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "semaq_plugin_enabled",
			Help: "1 for a plugin this node runs, 0 for one disabled after consecutive failures."}, []string{"plugin"}),
	}
	f.reg.MustRegister(pm.held, pm.pluginActive)
	return pm
}

// PolicyFinding counts n findings of one type by a rule.
func (m *Metrics) PolicyFinding(policy, stage, typ string, n int) {
	if m != nil && n > 0 {
		m.policy.findings.WithLabelValues(policy, stage, typ).Add(float64(n))
	}
}

// PolicyAction counts one action of a rule.
func (m *Metrics) PolicyAction(policy, stage, action string) {
	if m != nil {
		m.policy.actions.WithLabelValues(policy, stage, action).Inc()
	}
}

// PIIVault counts one vault operation.
func (m *Metrics) PIIVault(op, result string) {
	if m != nil {
		m.policy.vault.WithLabelValues(op, result).Inc()
	}
}

// PolicyHeld observes the bytes a token-stream policy holds back.
func (m *Metrics) PolicyHeld(n int) {
	if m != nil {
		m.policy.held.Observe(float64(n))
	}
}

// PluginCall counts one plugin call and its duration.
func (m *Metrics) PluginCall(plugin, stage, result string, seconds float64) {
	if m != nil {
		m.policy.pluginCalls.WithLabelValues(plugin, stage, result).Inc()
		m.policy.pluginTime.WithLabelValues(plugin).Observe(seconds)
	}
}

// PluginEnabled sets whether this node runs plugin; forget removes it.
func (m *Metrics) PluginEnabled(plugin string, on, forget bool) {
	if m == nil {
		return
	}
	switch {
	case forget:
		m.policy.pluginActive.DeleteLabelValues(plugin)
	case on:
		m.policy.pluginActive.WithLabelValues(plugin).Set(1)
	default:
		m.policy.pluginActive.WithLabelValues(plugin).Set(0)
	}
}
