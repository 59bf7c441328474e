package bench

import (
	"math"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Range of a latency histogram: 100 ns to one minute at three significant
// digits, so a 50 µs latency is resolved to 0.1 µs.
const (
	histMin    = int64(100 * time.Nanosecond)
	histMax    = int64(time.Minute)
	histDigits = 3
)

// histogram records latencies. It is not safe for concurrent use.
type histogram struct{ h *hdrhistogram.Histogram }

func newHistogram() *histogram {
	return &histogram{h: hdrhistogram.New(histMin, histMax, histDigits)}
}

// record adds one latency; values outside the range are clamped to it.
func (h *histogram) record(d time.Duration) {
	v := max(int64(d), histMin)
	v = min(v, histMax)
	_ = h.h.RecordValue(v) // cannot fail inside the range
}

func (h *histogram) merge(o *histogram) { h.h.Merge(o.h) }

func (h *histogram) count() int64 { return h.h.TotalCount() }

// Latency summarises a latency distribution in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

func (h *histogram) summary() Latency {
	if h.count() == 0 {
		return Latency{}
	}
	return Latency{
		P50:  micros(h.h.ValueAtQuantile(50)),
		P90:  micros(h.h.ValueAtQuantile(90)),
		P99:  micros(h.h.ValueAtQuantile(99)),
		P999: micros(h.h.ValueAtQuantile(99.9)),
		Mean: round1(h.h.Mean() / 1e3),
		Max:  micros(h.h.Max()),
	}
}

// sub returns l - o, field by field: how much slower l is.
func (l Latency) sub(o Latency) Latency {
	return Latency{
		P50:  round1(l.P50 - o.P50),
		P90:  round1(l.P90 - o.P90),
		P99:  round1(l.P99 - o.P99),
		P999: round1(l.P999 - o.P999),
		Mean: round1(l.Mean - o.Mean),
		Max:  round1(l.Max - o.Max),
	}
}

func micros(ns int64) float64 { return round1(float64(ns) / 1e3) }

func round1(f float64) float64 { return math.Round(f*10) / 10 }
