package clusterstatus

import (
	"slices"
	"testing"

	"github.com/semaq/semaq/semaq"
)

func TestSyncDisagreement(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []semaq.ClusterNode
		want  string
	}{
		{"none", nil, ""},
		{"agree", []semaq.ClusterNode{{Name: "n1", Sync: "always"}, {Name: "n2", Sync: "always"}}, ""},
		{"unknown mode ignored", []semaq.ClusterNode{{Name: "n1", Sync: "always"}, {Name: "n2"}}, ""},
		{"disagree", []semaq.ClusterNode{{Name: "n3", Sync: "interval"}, {Name: "n2", Sync: "always"}, {Name: "n1", Sync: "interval"}},
			"nodes disagree on sync (always on n2; interval on n1, n3): an acknowledgement of a replicated " +
				"stream promises only what the least durable node of its quorum does; give every node the same --sync " +
				"(docs/durability.md)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := syncDisagreement(tc.nodes); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSplitBrain(t *testing.T) {
	got := splitBrain(map[string][]string{"queue JOBS": {"n2", "n1"}, "the meta group": {"n3"}, "queue B": {"n1", "n2", "n3"}})
	want := []string{
		"split brain: queue B is led by 3 nodes at once: n1, n2, n3",
		"split brain: queue JOBS is led by 2 nodes at once: n1, n2",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("warnings %q, want %q", got, want)
	}
}
