package broker

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

func TestSubjectMatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"ai.x", "ai.x", true},
		{"ai.x", "ai.y", false},
		{"ai.x", "ai.x.y", false},
		{"ai.x.y", "ai.x", false},
		{"ai.*", "ai.x", true},
		{"ai.*", "ai.x.y", false},
		{"ai.*", "ai", false},
		{"ai.>", "ai.x", true},
		{"ai.>", "ai.x.y.z", true},
		{"ai.>", "ai", false},
		{">", "ai", true},
		{"*", "ai", true},
		{"*", "ai.x", false},
		{"*.x.>", "ai.x.y", true},
		{"*.x.>", "ai.y.y", false},
		{"ai.inference.llm", "ai.inference.llmx", false},
		{"ai.inference.llmx", "ai.inference.llm", false},
	} {
		if got := subjectMatches(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("subjectMatches(%q, %q) = %v", tc.pattern, tc.subject, got)
		}
	}
}

// refMatches is the obvious implementation subjectMatches must agree with.
func refMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) || p != "*" && p != st[i] {
			return false
		}
	}
	return len(pt) == len(st)
}

func FuzzSubjectMatches(f *testing.F) {
	f.Add("ai.>", "ai.x.y")
	f.Add("*.x", "a.x")
	f.Add("a.b.c", "a.b")
	f.Fuzz(func(t *testing.T, pattern, subject string) {
		if checkSubject(pattern, true) != nil || checkSubject(subject, false) != nil {
			return
		}
		if got, want := subjectMatches(pattern, subject), refMatches(pattern, subject); got != want {
			t.Fatalf("subjectMatches(%q, %q) = %v, want %v", pattern, subject, got, want)
		}
	})
}

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
		r, err := compileRule(env, d)
		if err != nil {
			return
		}
		var sum uint64
		for _, tg := range r.to {
			if checkSubject(tg.subject, false) != nil {
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

func splitRule(t testing.TB, weights ...int) *rule {
	t.Helper()
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	d := semaq.Route{Name: "ab", Subject: "ai.>", StickyKey: `headers["X-User"]`}
	for i, w := range weights {
		d.Split = append(d.Split, semaq.RouteSplit{Subject: fmt.Sprintf("gpu.%c", 'a'+i), Weight: w})
	}
	r, err := compileRule(env, d)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func pickFor(t testing.TB, r *rule, user string) string {
	t.Helper()
	tg, _, err := r.judge(expr.Message{Subject: "ai.x", Header: map[string][]string{"X-User": {user}}})
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

// routeBench is an ingress serving AI (ai.>) and GPU (gpu.>) with a table
// of rules, without a server: the cost of routing alone.
func routeBench(b *testing.B, defs []semaq.Route) (*ingress, *routeTable, *ingressStream) {
	env, err := expr.NewEnv()
	if err != nil {
		b.Fatal(err)
	}
	m := &routeModel{rules: map[string]*rule{}, broken: map[string]*brokenRule{}}
	for _, d := range defs {
		r, err := compileRule(env, d)
		if err != nil {
			b.Fatal(err)
		}
		m.rules[d.Name] = r
	}
	ai := &ingressStream{name: "AI", subjects: []string{"ai.>"}}
	in := &ingress{streams: map[string]*ingressStream{"AI": ai, "GPU": {name: "GPU", subjects: []string{"gpu.>"}}}}
	in.publishServed()
	return in, m.table(), ai
}

// BenchmarkRoute is the routing step of the ingress per message.
func BenchmarkRoute(b *testing.B) {
	for _, bc := range []struct {
		name string
		rule func(i int) semaq.Route
	}{
		{"other-subjects", func(i int) semaq.Route {
			return semaq.Route{Subject: fmt.Sprintf("svc%d.>", i), To: "gpu.a"}
		}},
		{"same-subject-false", func(i int) semaq.Route {
			return semaq.Route{Subject: "ai.inference.llm", When: fmt.Sprintf(`model.startsWith("gemma%d")`, i), To: "gpu.a"}
		}},
		{"tenth-matches", func(i int) semaq.Route {
			return semaq.Route{Subject: "ai.inference.llm", When: fmt.Sprintf(`model.startsWith("llama%d")`, i+3-9), To: "gpu.a"}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var defs []semaq.Route
			for i := range 10 {
				d := bc.rule(i)
				d.Name = fmt.Sprintf("r%02d", i)
				defs = append(defs, d)
			}
			in, rt, ai := routeBench(b, defs)
			h := nats.Header{semaq.HdrModel: {"llama3-70b"}, semaq.HdrTenant: {"acme"}}
			m := &nats.Msg{Subject: "ai.inference.llm", Header: h, Data: make([]byte, 256)}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, e := in.route(rt, ai, m); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}
