// Package measure is the measuring vocabulary every benchmark of
// semaq-bench shares: HDR latency histograms and their summary in
// microseconds (Latency), the rounding the reports print with, and the CPU
// time the process used. It is a leaf: the harness (bench) and each
// benchmark built beside it (bench/dispatch, bench/tokens,
// bench/scenario) import it, so none of them has to import another for a
// histogram.
package measure

import (
	"math"
	"slices"
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

// Histogram records latencies. It is not safe for concurrent use.
type Histogram struct{ h *hdrhistogram.Histogram }

// NewHistogram makes an empty latency histogram.
func NewHistogram() *Histogram {
	return &Histogram{h: hdrhistogram.New(histMin, histMax, histDigits)}
}

// Record adds one latency; values outside the range are clamped to it.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), histMin)
	v = min(v, histMax)
	_ = h.h.RecordValue(v) // cannot fail inside the range
}

// Merge adds o's recordings to h.
func (h *Histogram) Merge(o *Histogram) { h.h.Merge(o.h) }

// Count is how many latencies h holds.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// ValueAtQuantile is the recorded value at quantile q (0 to 100), in
// nanoseconds.
func (h *Histogram) ValueAtQuantile(q float64) int64 { return h.h.ValueAtQuantile(q) }

// Min is the smallest recorded value, in nanoseconds.
func (h *Histogram) Min() int64 { return h.h.Min() }

// Latency summarises a latency distribution in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
}

// Summary is h's percentiles, mean and maximum in microseconds; zero when
// h is empty.
func (h *Histogram) Summary() Latency {
	if h.Count() == 0 {
		return Latency{}
	}
	return Latency{
		P50:  Micros(h.h.ValueAtQuantile(50)),
		P90:  Micros(h.h.ValueAtQuantile(90)),
		P99:  Micros(h.h.ValueAtQuantile(99)),
		P999: Micros(h.h.ValueAtQuantile(99.9)),
		Mean: Round1(h.h.Mean() / 1e3),
		Max:  Micros(h.h.Max()),
	}
}

// Sub returns l - o, field by field: how much slower l is.
func (l Latency) Sub(o Latency) Latency {
	return Latency{
		P50:  Round1(l.P50 - o.P50),
		P90:  Round1(l.P90 - o.P90),
		P99:  Round1(l.P99 - o.P99),
		P999: Round1(l.P999 - o.P999),
		Mean: Round1(l.Mean - o.Mean),
		Max:  Round1(l.Max - o.Max),
	}
}

// Micros converts nanoseconds to microseconds, to 0.1 µs.
func Micros(ns int64) float64 { return Round1(float64(ns) / 1e3) }

// Round1 rounds f to one decimal.
func Round1(f float64) float64 { return math.Round(f*10) / 10 }

// Round2 rounds f to two decimals.
func Round2(f float64) float64 { return math.Round(f*100) / 100 }

// Ratio is a over b to two decimals, 0 when b is not positive.
func Ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return Round2(a / b)
}

// Median is the middle value of v (the upper one of an even count), 0 for
// none; v is left as it was.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

// Bucket is one non-empty bucket of a histogram in transit: a value that
// falls in it and how many recordings it holds.
type Bucket [2]int64

// Buckets is h's non-empty buckets, for a child process handing its
// recordings back: at most one entry per bucket of the histogram's range
// (some 30,000), whatever the number of recordings.
func (h *Histogram) Buckets() []Bucket {
	var out []Bucket
	for _, b := range h.h.Distribution() {
		if b.Count > 0 {
			out = append(out, Bucket{b.From, b.Count})
		}
	}
	return out
}

// FromBuckets rebuilds a histogram from its buckets.
func FromBuckets(bs []Bucket) *Histogram {
	h := NewHistogram()
	for _, b := range bs {
		v := min(max(b[0], histMin), histMax)
		_ = h.h.RecordValues(v, b[1])
	}
	return h
}
