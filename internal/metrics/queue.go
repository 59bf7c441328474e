package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// QueueStat is the state of one dispatch queue's messages for one tenant,
// priority and model, as a QueueStatsSource reports it at scrape time.
type QueueStat struct {
	Tenant   string
	Priority int // 0 (highest) to 9
	Model    string
	// Depth is the number of messages waiting.
	Depth int
	// OldestAge is how long the oldest waiting message has waited.
	OldestAge time.Duration
	// TokensWaiting sums the AI-Prompt-Tokens of the waiting messages.
	TokensWaiting int64
}

// QueueStatsSource is implemented by the dispatcher. QueueStats is called
// on every scrape, from the scraping goroutine, and must be safe for
// concurrent use and cheap (a snapshot of counters, no I/O). Several
// entries with the same tenant, priority and model are summed (OldestAge:
// the largest).
type QueueStatsSource interface {
	QueueStats() []QueueStat
}

// AddQueueSource makes the scrape read src; remove stops that.
func (m *Metrics) AddQueueSource(src QueueStatsSource) (remove func()) {
	if m == nil {
		return func() {}
	}
	return m.queueSources.add(src)
}

// Reasons a message leaves a dispatch queue without being dispatched: the
// reason label of semaq_queue_dropped_total.
const (
	DropExpired  = "expired"  // its AI-Deadline passed while waiting
	DropRejected = "rejected" // refused (queue full, tenant over quota)
	DropCanceled = "canceled" // withdrawn by its sender
)

// Queue holds the pre-resolved dispatch metrics of one tenant, priority and
// model. A nil *Queue records nothing.
type Queue struct {
	wait       prometheus.Observer
	dispatched prometheus.Counter
	dropped    *prometheus.CounterVec
	labels     queueKey
}

type queueKey struct {
	tenant, priority, model string
}

// Queue returns the dispatch handle of tenant, priority and model; keep it
// per message class rather than calling Queue per message when you can.
func (m *Metrics) Queue(tenant string, priority int, model string) *Queue {
	if m == nil {
		return nil
	}
	k := queueKey{m.tenants.value(tenant), priorityLabel(priority), m.models.value(model)}
	return m.queueHandles.get(k, func(k queueKey) *Queue {
		return &Queue{
			wait:       m.queueWait.WithLabelValues(k.tenant, k.priority, k.model),
			dispatched: m.queueDispatched.WithLabelValues(k.tenant, k.priority, k.model),
			dropped:    m.queueDropped,
			labels:     k,
		}
	})
}

// Dispatched records a message handed to a worker after waiting d.
func (q *Queue) Dispatched(wait time.Duration) {
	if q == nil {
		return
	}
	q.dispatched.Inc()
	q.wait.Observe(wait.Seconds())
}

// Dropped counts a message that left the queue undispatched; reason is one
// of the Drop* constants (anything else counts as Other).
func (q *Queue) Dropped(reason string) {
	if q == nil {
		return
	}
	switch reason {
	case DropExpired, DropRejected, DropCanceled:
	default:
		reason = Other
	}
	q.dropped.WithLabelValues(q.labels.tenant, q.labels.priority, q.labels.model, reason).Inc()
}

var priorityLabels = [...]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

func priorityLabel(p int) string {
	if p < 0 || p >= len(priorityLabels) {
		return Other
	}
	return priorityLabels[p]
}

var (
	queueDepthDesc = prometheus.NewDesc("semaq_queue_messages",
		"Messages waiting in dispatch queues, by tenant, priority and model.", []string{"tenant", "priority", "model"}, nil)
	queueAgeDesc = prometheus.NewDesc("semaq_queue_oldest_age_seconds",
		"Age of the oldest message waiting in dispatch queues, by tenant, priority and model.", []string{"tenant", "priority", "model"}, nil)
	queueTokensDesc = prometheus.NewDesc("semaq_queue_prompt_tokens",
		"Prompt tokens (AI-Prompt-Tokens) of the messages waiting in dispatch queues, by tenant, priority and model.", []string{"tenant", "priority", "model"}, nil)
)

// queueCollector reads the queue sources at scrape time.
type queueCollector struct{ m *Metrics }

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDepthDesc
	ch <- queueAgeDesc
	ch <- queueTokensDesc
}

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	type agg struct {
		depth  int
		oldest time.Duration
		tokens int64
	}
	sum := make(map[queueKey]*agg)
	for _, src := range c.m.queueSources.list() {
		for _, st := range src.QueueStats() {
			k := queueKey{c.m.tenants.value(st.Tenant), priorityLabel(st.Priority), c.m.models.value(st.Model)}
			a := sum[k]
			if a == nil {
				a = &agg{}
				sum[k] = a
			}
			a.depth += st.Depth
			a.tokens += st.TokensWaiting
			a.oldest = max(a.oldest, st.OldestAge)
		}
	}
	for k, a := range sum {
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(a.depth), k.tenant, k.priority, k.model)
		ch <- prometheus.MustNewConstMetric(queueAgeDesc, prometheus.GaugeValue, a.oldest.Seconds(), k.tenant, k.priority, k.model)
		ch <- prometheus.MustNewConstMetric(queueTokensDesc, prometheus.GaugeValue, float64(a.tokens), k.tenant, k.priority, k.model)
	}
}
