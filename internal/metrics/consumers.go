package metrics

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// ConsumerStat is one JetStream consumer as the broker reads it at scrape
// time.
type ConsumerStat struct {
	Stream, Consumer string
	// Durable is false for ephemeral consumers, whose generated names would
	// churn label values: they are summed per stream as consumer
	// "_ephemeral".
	Durable bool
	// Pending is messages not yet delivered (the consumer's lag).
	Pending uint64
	// AckPending is messages delivered and not yet acknowledged.
	AckPending uint64
	// Redelivered is messages delivered more than once and still unacked.
	Redelivered uint64
}

// EphemeralConsumer is the consumer label of the summed ephemeral consumers
// of a stream.
const EphemeralConsumer = "_ephemeral"

// SetConsumerSource sets the function the scrape calls for consumer state;
// it is called on the scraping goroutine and should be bounded in time.
func (m *Metrics) SetConsumerSource(fn func() []ConsumerStat) {
	if m == nil {
		return
	}
	m.consumerMu.Lock()
	m.consumerFn = fn
	m.consumerMu.Unlock()
}

var (
	consumerLabels      = []string{"stream", "consumer"}
	consumerPendingDesc = prometheus.NewDesc("semaq_consumer_pending_messages",
		"Messages a JetStream consumer has yet to deliver (its lag).", consumerLabels, nil)
	consumerAckPendingDesc = prometheus.NewDesc("semaq_consumer_ack_pending_messages",
		"Messages a JetStream consumer delivered that are not yet acknowledged.", consumerLabels, nil)
	consumerRedeliveredDesc = prometheus.NewDesc("semaq_consumer_redelivered_messages",
		"Messages a JetStream consumer delivered more than once that are not yet acknowledged.", consumerLabels, nil)
	consumersOmittedDesc = prometheus.NewDesc("semaq_consumers_unreported",
		"Durable consumers left out of the semaq_consumer_* families by the cap (the ones with the least pending).", nil, nil)
)

type consumerCollector struct{ m *Metrics }

func (c consumerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- consumerPendingDesc
	ch <- consumerAckPendingDesc
	ch <- consumerRedeliveredDesc
	ch <- consumersOmittedDesc
}

func (c consumerCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.consumerMu.Lock()
	fn := c.m.consumerFn
	c.m.consumerMu.Unlock()
	if fn == nil {
		return
	}
	stats := fn()
	// Keep the consumers furthest behind when there are more than the
	// cap: they are the ones an operator is looking for.
	slices.SortStableFunc(stats, func(a, b ConsumerStat) int {
		return cmp.Or(cmp.Compare(b.Pending+b.AckPending, a.Pending+a.AckPending),
			cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.Consumer, b.Consumer))
	})
	type key struct{ stream, consumer string }
	sum := make(map[key]*ConsumerStat)
	var order []key
	reported, omitted := 0, 0
	for _, st := range stats {
		k := key{c.m.streams.value(st.Stream), st.Consumer}
		if !st.Durable {
			k.consumer = EphemeralConsumer
		} else if _, ok := sum[k]; !ok {
			if reported >= c.m.opts.MaxConsumers {
				omitted++
				continue
			}
			reported++
		}
		a := sum[k]
		if a == nil {
			a = &ConsumerStat{}
			sum[k] = a
			order = append(order, k)
		}
		a.Pending += st.Pending
		a.AckPending += st.AckPending
		a.Redelivered += st.Redelivered
	}
	for _, k := range order {
		a := sum[k]
		ch <- prometheus.MustNewConstMetric(consumerPendingDesc, prometheus.GaugeValue, float64(a.Pending), k.stream, k.consumer)
		ch <- prometheus.MustNewConstMetric(consumerAckPendingDesc, prometheus.GaugeValue, float64(a.AckPending), k.stream, k.consumer)
		ch <- prometheus.MustNewConstMetric(consumerRedeliveredDesc, prometheus.GaugeValue, float64(a.Redelivered), k.stream, k.consumer)
	}
	ch <- prometheus.MustNewConstMetric(consumersOmittedDesc, prometheus.GaugeValue, float64(omitted))
}
