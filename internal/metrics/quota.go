package metrics

// QuotaRefused counts one message refused by a quota (internal/broker/quota):
// quota is rpm, tpm or max_queued_tokens, scope tenant or user. The tenant
// label goes through the tenant cap like every other.
func (m *Metrics) QuotaRefused(tenant, quota, scope string) {
	if m == nil {
		return
	}
	m.quotaRefusals.WithLabelValues(m.tenants.value(tenant), quota, scope).Inc()
}
