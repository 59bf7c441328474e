package groupcommit

import (
	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/semaq/semaq/semaq"
)

// histogram is an HDR histogram of non-negative integers. Not safe for
// concurrent use: callers hold their own lock.
type histogram struct{ h *hdrhistogram.Histogram }

func newHistogram(lowest, highest int64) *histogram {
	return &histogram{h: hdrhistogram.New(lowest, highest, 3)}
}

func (h *histogram) record(v int64) {
	if v < h.h.LowestTrackableValue() {
		v = h.h.LowestTrackableValue()
	}
	if v > h.h.HighestTrackableValue() {
		v = h.h.HighestTrackableValue()
	}
	_ = h.h.RecordValue(v)
}

func (h *histogram) summary() semaq.Summary {
	if h.h.TotalCount() == 0 {
		return semaq.Summary{}
	}
	return semaq.Summary{
		Count: h.h.TotalCount(), Mean: h.h.Mean(),
		P50: h.h.ValueAtQuantile(50), P90: h.h.ValueAtQuantile(90),
		P99: h.h.ValueAtQuantile(99), Max: h.h.Max(),
	}
}
