package table

import (
	"fmt"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker/keyhash"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// TestPickAdaptiveSticky: weighted rendezvous picks in proportion to the
// weights, and when one target's weight falls only keys leaving it move.
func TestPickAdaptiveSticky(t *testing.T) {
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	r, err := CompileRule(env, semaq.Route{Name: "r", Subject: "x", Adaptive: true, StickyKey: "tenant",
		Split: []semaq.RouteSplit{{Subject: "a", Weight: 50}, {Subject: "b", Weight: 30}, {Subject: "c", Weight: 20}}}, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 20000
	pick := func() (map[string]string, map[string]int) {
		at, n := map[string]string{}, map[string]int{}
		for i := range keys {
			k := fmt.Sprintf("tenant-%d", i)
			s := r.pickAdaptive(keyhash.Of(k)).subject
			at[k] = s
			n[s]++
		}
		return at, n
	}
	before, n := pick()
	for s, want := range map[string]float64{"a": 0.5, "b": 0.3, "c": 0.2} {
		if got := float64(n[s]) / keys; got < want-0.02 || got > want+0.02 {
			t.Errorf("configured weights: %s has %.3f of the keys, want %.2f", s, got, want)
		}
	}
	r.SetWeights(&Weights{Effective: []float64{10, 30, 20}})
	after, n := pick()
	if got := float64(n["a"]) / keys; got < 10.0/60-0.02 || got > 10.0/60+0.02 {
		t.Errorf("a at 10 of 60: %.3f of the keys", got)
	}
	moved := 0
	for k, s := range before {
		if after[k] != s {
			moved++
			if s != "a" {
				t.Fatalf("key %s moved from %s to %s; only a lost weight", k, s, after[k])
			}
		}
	}
	if moved == 0 {
		t.Fatal("no key moved")
	}
}
