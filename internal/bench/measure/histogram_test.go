package measure

import (
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	t.Parallel()
	h := NewHistogram()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	h.Record(0)         // clamped up
	h.Record(time.Hour) // clamped down
	l := h.Summary()
	if l.P50 < 499 || l.P50 > 502 || l.P99 < 988 || l.P99 > 993 || l.Max < 59e6 {
		t.Errorf("summary %+v, want p50 ≈ 500, p99 ≈ 990, max ≈ 60e6 µs", l)
	}
	if got := NewHistogram().Summary(); got != (Latency{}) {
		t.Errorf("empty summary = %+v", got)
	}
}

// A histogram handed over by a child reads as the one it recorded.
func TestHistogramBucketsRoundTrip(t *testing.T) {
	t.Parallel()
	h := NewHistogram()
	for i := range 5000 {
		h.Record(time.Duration(i*i%7919) * time.Microsecond)
	}
	h.Record(time.Hour) // clamped
	got := FromBuckets(h.Buckets())
	if got.Count() != h.Count() || got.Summary().P99 != h.Summary().P99 || got.Summary().P50 != h.Summary().P50 || got.Summary().Max != h.Summary().Max {
		t.Fatalf("round trip: %+v (%d), want %+v (%d)", got.Summary(), got.Count(), h.Summary(), h.Count())
	}
}

func TestRatio(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ a, b, want float64 }{
		{1, 3, 0.33},
		{2, 3, 0.67},
		{5, 0, 0},  // no baseline
		{5, -1, 0}, // nor a negative one
	} {
		if got := Ratio(tc.a, tc.b); got != tc.want {
			t.Errorf("Ratio(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
