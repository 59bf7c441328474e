package metrics

// Outcomes of keeping a gateway answer in its session: the outcome label
// of semaq_gateway_session_rounds_total.
const (
	SessionRoundStored = "stored"
	SessionRoundFailed = "failed"
)

// GatewaySessionRound counts one answer the gateway wrote, or failed to
// write, as a round of the session its request named.
func (m *Metrics) GatewaySessionRound(stored bool) {
	if m == nil {
		return
	}
	outcome := SessionRoundStored
	if !stored {
		outcome = SessionRoundFailed
	}
	m.gwSessionRounds.WithLabelValues(outcome).Inc()
}
