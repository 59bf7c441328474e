package models

import (
	"strings"
	"testing"

	"github.com/semaq/semaq/semaq"
)

// The gate with the seeds' defaults: p95 drift within ±8 %, memory growth
// under 15 %, cold start under 300 ms; each failure names its figures.
func TestGate(t *testing.T) {
	base := semaq.ModelFigures{P95Ms: 400, MemoryMB: 16000, ColdStartMs: 200}
	cases := []struct {
		name string
		cand *semaq.ModelFigures
		gate semaq.ModelGate
		fail []string
	}{
		{"within every bound", &semaq.ModelFigures{P95Ms: 430, MemoryMB: 18000, ColdStartMs: 299}, semaq.ModelGate{}, nil},
		{"faster is drift too", &semaq.ModelFigures{P95Ms: 360, MemoryMB: 16000, ColdStartMs: 100}, semaq.ModelGate{}, []string{"p95 drift -10.0%"}},
		{"slower", &semaq.ModelFigures{P95Ms: 440, MemoryMB: 16000, ColdStartMs: 100}, semaq.ModelGate{}, []string{"p95 drift +10.0% (440ms against 400ms)"}},
		{"memory", &semaq.ModelFigures{P95Ms: 400, MemoryMB: 18400, ColdStartMs: 100}, semaq.ModelGate{}, []string{"memory growth +15.0%"}},
		{"cold start", &semaq.ModelFigures{P95Ms: 400, MemoryMB: 16000, ColdStartMs: 300}, semaq.ModelGate{}, []string{"cold start 300ms is not under 300ms"}},
		{"configured gate", &semaq.ModelFigures{P95Ms: 440, MemoryMB: 16000, ColdStartMs: 100}, semaq.ModelGate{P95DriftPct: 12}, nil},
		{"no figures", nil, semaq.ModelGate{}, []string{"no figures reported for v2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &semaq.ModelInfo{Name: "llama3", Active: "v1", Gate: c.gate, Versions: []semaq.ModelVersion{
				{Version: "v1", State: semaq.ModelStateActive, Figures: &base},
				{Version: "v2", State: semaq.ModelStateRegistered, Figures: c.cand},
			}}
			r := evaluate(m, "v2")
			if r.Passed != (len(c.fail) == 0) {
				t.Fatalf("passed %v; failures %v", r.Passed, r.Failures)
			}
			got := strings.Join(r.Failures, "; ")
			for _, f := range c.fail {
				if !strings.Contains(got, f) {
					t.Errorf("failures %q lack %q", got, f)
				}
			}
			if len(c.fail) > 0 && !strings.Contains(gateError("llama3", "v2", r).Error(), c.fail[0]) {
				t.Errorf("the refusal %q does not give the figures", gateError("llama3", "v2", r))
			}
		})
	}
	// Without an active version only the cold start is judged.
	m := &semaq.ModelInfo{Name: "llama3", Versions: []semaq.ModelVersion{{Version: "v1", Figures: &semaq.ModelFigures{P95Ms: 1, ColdStartMs: 10}}}}
	if r := evaluate(m, "v1"); !r.Passed || r.Baseline != "" {
		t.Fatalf("first version: %+v", r)
	}
}
