package metrics

import "github.com/prometheus/client_golang/prometheus"

// ClassStat is one hardware class of work queues at scrape time
// (docs/queues.md): its leases held cluster-wide, as the scraped node
// last heard, and its cap (0: none). Class names are an admin's, at most
// semaq.MaxClasses of them.
type ClassStat struct {
	Class     string
	Held, Max int
}

var (
	classLeasesDesc = prometheus.NewDesc("semaq_class_leases",
		"Requests of a hardware class workers hold now, cluster-wide (its slots held, as this node last heard).", []string{"class"}, nil)
	classMaxDesc = prometheus.NewDesc("semaq_class_max_concurrency",
		"A hardware class's cap on held requests; 0: none.", []string{"class"}, nil)
)

type classCollector struct{ fn func() []ClassStat }

func (c classCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- classLeasesDesc
	ch <- classMaxDesc
}

func (c classCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.fn() {
		ch <- prometheus.MustNewConstMetric(classLeasesDesc, prometheus.GaugeValue, float64(st.Held), st.Class)
		ch <- prometheus.MustNewConstMetric(classMaxDesc, prometheus.GaugeValue, float64(st.Max), st.Class)
	}
}

// SetClassSource registers the classes' families, read from fn at scrape
// time (on the scraping goroutine; it must not block). Called once.
func (m *Metrics) SetClassSource(fn func() []ClassStat) {
	if m != nil {
		m.reg.MustRegister(classCollector{fn})
	}
}
