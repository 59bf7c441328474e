package scenario

import (
	"math"
	"runtime/metrics"
	"time"

	"github.com/semaq/semaq/internal/bench/measure"
)

// gcSample is the process's garbage collection so far, from
// runtime/metrics: the broker and the clients share the process, so this
// is what the whole run cost the collector.
type gcSample struct {
	cycles       uint64
	pauseSeconds float64 // total stop-the-world time for GC
	maxPause     float64 // largest pause bucket seen, seconds
	allocBytes   int64
}

var gcMetrics = []string{"/gc/cycles/total:gc-cycles", "/sched/pauses/total/gc:seconds", "/gc/heap/allocs:bytes"}

func readGC() gcSample {
	s := make([]metrics.Sample, len(gcMetrics))
	for i, n := range gcMetrics {
		s[i].Name = n
	}
	metrics.Read(s)
	var g gcSample
	if s[0].Value.Kind() == metrics.KindUint64 {
		g.cycles = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindFloat64Histogram {
		g.pauseSeconds, g.maxPause = histSum(s[1].Value.Float64Histogram())
	}
	if s[2].Value.Kind() == metrics.KindUint64 {
		g.allocBytes = int64(s[2].Value.Uint64())
	}
	return g
}

// histSum estimates the total of a runtime histogram (each count at its
// bucket's midpoint) and its largest non-empty bucket's upper bound.
func histSum(h *metrics.Float64Histogram) (sum, maxv float64) {
	for i, c := range h.Counts {
		if c == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		if math.IsInf(lo, -1) {
			lo = 0
		}
		if math.IsInf(hi, 1) {
			hi = lo
		}
		sum += float64(c) * (lo + hi) / 2
		maxv = hi
	}
	return sum, maxv
}

// GCStats is what the collector did during the measured window.
type GCStats struct {
	Cycles uint64 `json:"cycles"`
	// PauseTotalUS is the stop-the-world time, PauseFraction its share of
	// the window.
	PauseTotalUS  float64 `json:"pause_total_us"`
	PauseFraction float64 `json:"pause_fraction"`
	// MaxPauseUS is the upper bound of the longest pause's bucket, over
	// the whole process life.
	MaxPauseUS float64 `json:"max_pause_us"`
	AllocBytes int64   `json:"alloc_bytes"`
}

func (g gcSample) since(o gcSample, window time.Duration) GCStats {
	pause := g.pauseSeconds - o.pauseSeconds
	return GCStats{
		Cycles:        g.cycles - o.cycles,
		PauseTotalUS:  measure.Round1(pause * 1e6),
		PauseFraction: math.Round(pause/window.Seconds()*1e5) / 1e5,
		MaxPauseUS:    measure.Round1(g.maxPause * 1e6),
		AllocBytes:    g.allocBytes - o.allocBytes,
	}
}
