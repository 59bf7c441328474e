package metrics

import "github.com/prometheus/client_golang/prometheus"

// StoreChecked exports what the store check at start found and did
// (store_check): damaged records, and damaged stream replicas moved aside
// to be caught up from the other replicas. Called once, when the check
// runs; a node the check stops from starting exports nothing.
func (m *Metrics) StoreChecked(damaged, repaired int) {
	if m == nil {
		return
	}
	d := prometheus.NewCounter(prometheus.CounterOpts{Name: "semaq_store_check_damaged_total",
		Help: "Damaged records the store check found in the node's message blocks at start."})
	r := prometheus.NewCounter(prometheus.CounterOpts{Name: "semaq_store_check_repaired_total",
		Help: "Damaged stream replicas the store check moved aside at start (store_check: repair)."})
	d.Add(float64(damaged))
	r.Add(float64(repaired))
	m.reg.MustRegister(d, r)
}
