package routes

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// entry is a bucket entry as the rule watcher gets it.
type entry struct {
	key string
	val []byte
	rev uint64
	op  jetstream.KeyValueOp
}

func (e entry) Bucket() string                  { return "SQ_ROUTES" }
func (e entry) Key() string                     { return e.key }
func (e entry) Value() []byte                   { return e.val }
func (e entry) Revision() uint64                { return e.rev }
func (e entry) Created() time.Time              { return time.Time{} }
func (e entry) Delta() uint64                   { return 0 }
func (e entry) Operation() jetstream.KeyValueOp { return e.op }

func put(t *testing.T, key string, v any, rev uint64) entry {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return entry{key: key, val: b, rev: rev, op: jetstream.KeyValuePut}
}

// The stored weights of an adaptive rule are applied by the rule watcher,
// in either order of arrival, only for the rule's own revision and
// targets; they are never listed as a rule.
func TestStoredWeightsApplied(t *testing.T) {
	env, err := expr.NewEnv()
	if err != nil {
		t.Fatal(err)
	}
	rule := semaq.Route{Name: "ab", Subject: "ai.x", Adaptive: true,
		Split: []semaq.RouteSplit{{Subject: "gpu.a", Weight: 50}, {Subject: "gpu.b", Weight: 50}}}
	rec := func(rev uint64, a string, share float64) weightsRecord {
		return weightsRecord{Rev: rev, Targets: []targetRecord{
			{Subject: a, Share: share, Health: 0.3, ErrRate: 0.7, Errors: 9},
			{Subject: "gpu.b", Share: 1, Health: 1},
		}}
	}
	effective := func(m *model) []float64 {
		tab := m.table()
		if len(tab.Rules()) != 1 || len(tab.Broken()) != 0 {
			t.Fatalf("table has %d rules and %d broken, want the rule alone", len(tab.Rules()), len(tab.Broken()))
		}
		var out []float64
		for _, h := range adaptiveHealth(tab.Rules()[0]) {
			out = append(out, h.Effective)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		entries func() []entry
		want    []float64
	}{
		{"weights after the rule", func() []entry {
			return []entry{put(t, "ab", rule, 1), put(t, "weights.ab", rec(1, "gpu.a", 0.4), 2)}
		}, []float64{20, 50}},
		{"weights before the rule", func() []entry {
			return []entry{put(t, "weights.ab", rec(3, "gpu.a", 0.4), 2), put(t, "ab", rule, 3)}
		}, []float64{20, 50}},
		{"weights of an earlier revision", func() []entry {
			return []entry{put(t, "weights.ab", rec(1, "gpu.a", 0.4), 2), put(t, "ab", rule, 3)}
		}, []float64{50, 50}},
		{"weights of other targets", func() []entry {
			return []entry{put(t, "ab", rule, 1), put(t, "weights.ab", rec(1, "gpu.c", 0.4), 2)}
		}, []float64{50, 50}},
		{"a share under the floor", func() []entry {
			return []entry{put(t, "ab", rule, 1), put(t, "weights.ab", rec(1, "gpu.a", 0), 2)}
		}, []float64{50 * semaq.MinAdaptiveShare, 50}},
		{"weights deleted", func() []entry {
			return []entry{put(t, "weights.ab", rec(3, "gpu.a", 0.4), 2),
				{key: "weights.ab", rev: 3, op: jetstream.KeyValueDelete}, put(t, "ab", rule, 4)}
		}, []float64{50, 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newModel(env, nil)
			for _, e := range tc.entries() {
				m.apply(e)
			}
			if got := effective(m); len(got) != 2 || got[0] != tc.want[0] || got[1] != tc.want[1] {
				t.Fatalf("effective weights %v, want %v", got, tc.want)
			}
		})
	}
}
