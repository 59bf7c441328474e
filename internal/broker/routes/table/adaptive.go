package table

import (
	"math"

	"github.com/semaq/semaq/internal/broker/keyhash"
	"github.com/semaq/semaq/semaq"
)

// Weights are what an adaptive split routes by in place of its configured
// weights: the routes subsystem computes them from the health of the
// targets' consumers (routes/health.go) and sets them on the rule, which
// the ingress then picks by. Immutable once set.
type Weights struct {
	// Effective are the weights the rule picks by, one per target in the
	// order Targets lists them.
	Effective []float64
	// Health and Source are the setter's, kept with the weights so that
	// one load reads all three: how it describes the targets, and what it
	// computed the weights from. The table reads neither.
	Health []semaq.RouteTargetHealth
	Source any
}

// SetWeights makes an adaptive rule pick by w; nil goes back to the
// configured weights. It ignores w for a rule that is not adaptive, or
// when w does not have one effective weight per target. Safe to call
// while the ingress matches with the rule.
func (r *Rule) SetWeights(w *Weights) {
	if !r.def.Adaptive || w != nil && len(w.Effective) != len(r.to) {
		return
	}
	r.eff.Store(w)
}

// Weights returns what SetWeights set last, nil when the rule routes by
// its configured weights.
func (r *Rule) Weights() *Weights { return r.eff.Load() }

// pickAdaptive chooses a target by weighted rendezvous hashing: each target
// scores -w / ln(u) for u uniform in (0, 1) drawn from h and the target, the
// highest wins. A random h picks in proportion to the weights; a key's h
// keeps its target while the weights allow.
func (r *Rule) pickAdaptive(h uint64) *Target {
	var ws []float64
	if a := r.eff.Load(); a != nil {
		ws = a.Effective
	}
	best, top := r.to[0], math.Inf(-1)
	for i, t := range r.to {
		w := float64(t.weight)
		if ws != nil {
			w = ws[i]
		}
		u := (float64(keyhash.Mix(h^keyhash.Of(t.subject))>>11) + 0.5) / (1 << 53)
		if s := -w / math.Log(u); s > top {
			best, top = t, s
		}
	}
	return best
}
