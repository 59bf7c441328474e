package dispatch

// TenantQueued is the prompt tokens of tenant's requests waiting in the
// queue (queued or delayed, not held by a worker), and the rate its
// workers serve tokens at (prompt and output, a second; 0 before any
// service).
// Tenant quotas ask it for messages bound to the queue; it takes the
// dispatcher's lock.
func (d *Dispatcher) TenantQueued(tenant string) (tokens int64, rate float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sched.TenantTokensQueued(tenant), d.stats.tokenRate
}
