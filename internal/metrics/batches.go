package metrics

import "github.com/prometheus/client_golang/prometheus"

// batchMetrics are batch publishing's families (docs/batches.md). door is
// how the batch came: nats (a batch frame on $SQ.API.PUB.BATCH: the SDK
// and the CLI), http (POST /api/v1/publish), stock (a stock NATS client's
// Nats-Batch-* messages); mode is fast or atomic.
type batchMetrics struct {
	batches  *prometheus.CounterVec
	messages *prometheus.CounterVec
	size     *prometheus.HistogramVec
	open     prometheus.Gauge
}

func newBatchMetrics(f factory) batchMetrics {
	bm := batchMetrics{
		batches: f.counter("semaq_batches_total",
			"Batches published, by door (nats, http, stock), mode (fast, atomic) and outcome: stored (every message), partial (a fast batch with refusals), refused (nothing stored), abandoned (a stock batch without its commit).", "door", "mode", "outcome"),
		messages: f.counter("semaq_batch_messages_total",
			"Messages of batches, by door, mode and result (stored, refused).", "door", "mode", "result"),
		size: f.histogram("semaq_batch_size_messages",
			"Messages per batch, by door.", []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}, "door"),
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: "semaq_batches_open",
			Help: "Batches the ingress holds: frames waiting for JetStream's acks and stock clients' atomic batches waiting for their commit."}),
	}
	f.reg.MustRegister(bm.open)
	return bm
}

// Batch counts one batch of n messages through door, in mode, of which
// stored were stored, with its outcome.
func (m *Metrics) Batch(door, mode, outcome string, n, stored int) {
	if m == nil {
		return
	}
	m.batch.batches.WithLabelValues(door, mode, outcome).Inc()
	m.batch.size.WithLabelValues(door).Observe(float64(n))
	if stored > 0 {
		m.batch.messages.WithLabelValues(door, mode, "stored").Add(float64(stored))
	}
	if n > stored {
		m.batch.messages.WithLabelValues(door, mode, "refused").Add(float64(n - stored))
	}
}

// BatchesOpen moves the gauge of batches held by d.
func (m *Metrics) BatchesOpen(d int) {
	if m != nil {
		m.batch.open.Add(float64(d))
	}
}
