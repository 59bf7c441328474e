package table

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// Rule definitions arrive as JSON from any client: whatever compiles must
// have literal targets and weights that add up.
func FuzzCompileRule(f *testing.F) {
	env, err := expr.NewEnv()
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"name":"a","subject":"ai.>","when":"model == \"x\"","to":"gpu.a"}`))
	f.Add([]byte(`{"name":"a","subject":"ai.>","split":[{"subject":"gpu.a","weight":7},{"subject":"gpu.b","weight":3}],"sticky_key":"tenant"}`))
	f.Add([]byte(`{"name":"a","subject":"ai.>","split":[{"subject":"gpu.a","weight":-7},{"subject":"gpu.a","weight":3}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d semaq.Route
		if json.Unmarshal(data, &d) != nil {
			return
		}
		r, err := CompileRule(env, d, 0, time.Time{})
		if err != nil {
			return
		}
		var sum uint64
		for _, tg := range r.to {
			if semaq.CheckSubject(tg.subject, false) != nil {
				t.Fatalf("target %q accepted", tg.subject)
			}
			sum += tg.weight
			if tg.upto != sum {
				t.Fatalf("cumulative weight %d, want %d", tg.upto, sum)
			}
		}
		if sum != r.total || sum == 0 {
			t.Fatalf("total %d, weights add to %d", r.total, sum)
		}
	})
}

func splitRule(t testing.TB, weights ...int) *Rule {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	d := semaq.Route{Name: "ab", Subject: "ai.>", StickyKey: `headers["X-User"]`}
	for i, w := range weights {
		d.Split = append(d.Split, semaq.RouteSplit{Subject: fmt.Sprintf("gpu.%c", 'a'+i), Weight: w})
	}
	r, err := CompileRule(env, d, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func pickFor(t testing.TB, r *Rule, user string) string {
	t.Helper()
	tg, _, err := r.Judge(expr.Message{Subject: "ai.x", Header: map[string][]string{"X-User": {user}}})
	if err != nil || tg == nil {
		t.Fatalf("judge: %v, %v", tg, err)
	}
	return tg.subject
}

// A sticky split follows its weights, and moving weight from one target to
// another moves only the keys it must: none leave the target that grew.
func TestStickySplitWeights(t *testing.T) {
	t.Parallel()
	const n = 20000
	before, after := splitRule(t, 90, 10), splitRule(t, 80, 20)
	onA, moved := 0, 0
	for i := range n {
		user := fmt.Sprintf("user-%d", i)
		b, a := pickFor(t, before, user), pickFor(t, after, user)
		if b == "gpu.a" {
			onA++
		}
		switch {
		case b == "gpu.b" && a != "gpu.b":
			t.Fatalf("%s left gpu.b when its weight grew", user)
		case b != a:
			moved++
		}
	}
	if share := float64(onA) / n; share < 0.88 || share > 0.92 {
		t.Fatalf("90/10 split sent %.3f to gpu.a", share)
	}
	if share := float64(moved) / n; share < 0.08 || share > 0.12 {
		t.Fatalf("90/10 -> 80/20 moved %.3f of keys, want about 0.10", share)
	}
	// Three targets, uneven weights.
	three := splitRule(t, 1, 2, 7)
	count := map[string]int{}
	for i := range n {
		count[pickFor(t, three, fmt.Sprintf("k%d", i))]++
	}
	for subj, want := range map[string]float64{"gpu.a": 0.1, "gpu.b": 0.2, "gpu.c": 0.7} {
		if got := float64(count[subj]) / n; got < want-0.02 || got > want+0.02 {
			t.Fatalf("%s got %.3f, want %.2f", subj, got, want)
		}
	}
}
