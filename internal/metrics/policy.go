package metrics

import "github.com/prometheus/client_golang/prometheus"

// ReasonPolicy is the reason label of a message a policy step refused.
const ReasonPolicy = "policy"

// PolicyStep holds the counters of one enabled policy step of the ingress,
// resolved once when the node starts. A nil *PolicyStep records nothing.
type PolicyStep struct {
	pass, rewrite, refuse prometheus.Counter
}

// PolicyStep returns the handle of the step enabled under name. Step names
// come from the node's configuration, never from a client.
func (m *Metrics) PolicyStep(name string) *PolicyStep {
	if m == nil {
		return nil
	}
	return &PolicyStep{
		pass:    m.policySteps.WithLabelValues(name, "pass"),
		rewrite: m.policySteps.WithLabelValues(name, "rewrite"),
		refuse:  m.policySteps.WithLabelValues(name, "refuse"),
	}
}

// Passed, Rewrote and Refused count one verdict of the step.
func (p *PolicyStep) Passed() {
	if p != nil {
		p.pass.Inc()
	}
}

func (p *PolicyStep) Rewrote() {
	if p != nil {
		p.rewrite.Inc()
	}
}

func (p *PolicyStep) Refused() {
	if p != nil {
		p.refuse.Inc()
	}
}
