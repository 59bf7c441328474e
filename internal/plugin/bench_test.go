package plugin

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/plugin/plugintest"
)

// BenchmarkIngress runs the ingress stage of noop (the machinery alone) and enrich (a small transform) on a
// typical request, reporting the median and 99th percentile of a call besides the mean.
func BenchmarkIngress(b *testing.B) {
	for _, c := range []struct{ name, pkg string }{{"noop", plugintest.Noop}, {"enrich", plugintest.Enrich}} {
		b.Run(c.name, func(b *testing.B) {
			p := load(b, c.pkg, Limits{MaxInstances: 1, Timeout: time.Second})
			m := &Message{
				Subject: "jobs.chat.completions",
				Header:  map[string][]string{"AI-Tenant": {"acme"}, "AI-Priority": {"2"}},
				Data:    []byte(`{"model":"llama3-70b","messages":[{"role":"user","content":"Summarise the incident report in three bullet points."}]}`),
			}
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if _, err := p.Ingress(ctx, m); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
