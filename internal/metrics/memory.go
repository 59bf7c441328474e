package metrics

import "github.com/prometheus/client_golang/prometheus"

// MemoryRefused counts one publish the ingress refused because the node's
// memory was past its high water (max_memory).
func (m *Metrics) MemoryRefused() {
	if m == nil {
		return
	}
	m.memoryRefusals.Inc()
}

// WatchMemory exports the node's max_memory and the memory in use it is
// held against (inUse), once, when the node applies a limit.
func (m *Metrics) WatchMemory(limit int64, inUse func() int64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "semaq_memory_limit_bytes",
			Help: "The node's max_memory: the Go runtime's soft limit, and the bound the ingress refuses publishes near."},
			func() float64 { return float64(limit) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "semaq_memory_in_use_bytes",
			Help: "Memory the node's Go runtime holds from the OS (mapped less released), sampled every 100 ms."},
			func() float64 { return float64(inUse()) }),
	)
}
