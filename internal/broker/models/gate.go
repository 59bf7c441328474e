package models

import (
	"fmt"
	"math"
	"strings"

	"github.com/semaq/semaq/semaq"
)

// evaluate is the promotion gate (docs/models.md, The gate): the
// candidate's reported figures against the active version's and the
// model's bounds. Without an active version (or its figures) only the
// cold start is judged; without the candidate's figures the gate fails.
func evaluate(m *semaq.ModelInfo, candidate string) *semaq.ModelGateResult {
	g := m.Gate.WithDefaults()
	r := &semaq.ModelGateResult{Gate: g}
	c := m.Version(candidate)
	if c == nil || c.Figures == nil {
		r.Failures = append(r.Failures, fmt.Sprintf("no figures reported for %s (semaq model report)", candidate))
		return r
	}
	r.Candidate = *c.Figures
	if c.Figures.ColdStartMs >= g.ColdStartMs {
		r.Failures = append(r.Failures, fmt.Sprintf("cold start %gms is not under %gms", c.Figures.ColdStartMs, g.ColdStartMs))
	}
	if a := m.Version(m.Active); a != nil && a.Version != candidate {
		r.Baseline = a.Version
		if a.Figures == nil {
			r.Failures = append(r.Failures, fmt.Sprintf("no figures reported for the active version %s to compare with", a.Version))
		} else {
			r.Active = *a.Figures
			r.P95DriftPct = pct(c.Figures.P95Ms, a.Figures.P95Ms)
			r.MemoryGrowthPct = pct(c.Figures.MemoryMB, a.Figures.MemoryMB)
			if math.Abs(r.P95DriftPct) > g.P95DriftPct {
				r.Failures = append(r.Failures, fmt.Sprintf("p95 drift %+.1f%% (%gms against %gms) is outside ±%g%%",
					r.P95DriftPct, c.Figures.P95Ms, a.Figures.P95Ms, g.P95DriftPct))
			}
			if r.MemoryGrowthPct >= g.MemoryGrowthPct {
				r.Failures = append(r.Failures, fmt.Sprintf("memory growth %+.1f%% (%gMB against %gMB) is not under %g%%",
					r.MemoryGrowthPct, c.Figures.MemoryMB, a.Figures.MemoryMB, g.MemoryGrowthPct))
			}
		}
	}
	r.Passed = len(r.Failures) == 0
	return r
}

// pct is the change from base to x in percent; from 0, any growth is
// infinite growth, reported as 100 % per unit so it stays JSON.
func pct(x, base float64) float64 {
	if base == 0 {
		if x == 0 {
			return 0
		}
		return 100 * x
	}
	return 100 * (x - base) / base
}

// gateDetail is the verdict in one line.
func gateDetail(r *semaq.ModelGateResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "p95 drift %+.1f%%, memory growth %+.1f%%, cold start %gms", r.P95DriftPct, r.MemoryGrowthPct, r.Candidate.ColdStartMs)
	if r.Baseline != "" {
		fmt.Fprintf(&b, " against %s", r.Baseline)
	}
	if len(r.Failures) > 0 {
		b.WriteString(": " + strings.Join(r.Failures, "; "))
	}
	return b.String()
}
