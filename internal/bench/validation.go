package bench

import (
	"runtime"
	"time"

	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/schema"
)

// GoalValidationNS is the most validating one inference request of about
// 300 bytes may take, in nanoseconds.
const GoalValidationNS = 10_000.0

// maxValidationTime bounds the in-process validation measurement.
const maxValidationTime = time.Second

// Validation is what checking one payload against the run's schema costs,
// measured in process, on one goroutine, before the broker starts: the
// schema.Schema.Validate the ingress calls for every message on a bound
// subject, on the bytes it calls it on (after Confluent's header). The
// ingress adds a binding lookup and a header to that.
type Validation struct {
	SchemaType   string  `json:"schema_type"`
	PayloadBytes int     `json:"payload_bytes"` // what Validate sees
	NSPerOp      float64 `json:"ns_per_op"`
	AllocsPerOp  float64 `json:"allocs_per_op"`
	BytesPerOp   float64 `json:"bytes_per_op"`
	Ops          int64   `json:"ops"`
	// NSPerOpMax is GoalValidationNS; Met says whether NSPerOp is within it.
	NSPerOpMax float64 `json:"ns_per_op_max"`
	Met        bool    `json:"met"`
}

// measureValidation validates body with s over and over for about d and
// reports the mean time and allocations of one call. body must be valid.
func measureValidation(s schema.Schema, body []byte, d time.Duration) (*Validation, error) {
	for range 100 { // warm-up: caches, branch predictors, the GC's pacing
		if err := s.Validate(body); err != nil {
			return nil, err
		}
	}
	const batch = 64 // calls between clock reads
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var ops int64
	start := time.Now()
	for time.Since(start) < d {
		for range batch {
			_ = s.Validate(body)
		}
		ops += batch
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	v := &Validation{
		SchemaType:   string(s.Type()),
		PayloadBytes: len(body),
		NSPerOp:      measure.Round1(float64(elapsed.Nanoseconds()) / float64(ops)),
		AllocsPerOp:  measure.Round1(float64(after.Mallocs-before.Mallocs) / float64(ops)),
		BytesPerOp:   measure.Round1(float64(after.TotalAlloc-before.TotalAlloc) / float64(ops)),
		Ops:          ops,
		NSPerOpMax:   GoalValidationNS,
	}
	v.Met = v.NSPerOp <= v.NSPerOpMax
	return v, nil
}
