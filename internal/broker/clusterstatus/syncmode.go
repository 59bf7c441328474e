package clusterstatus

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/semaq/semaq/semaq"
)

// syncDisagreement describes the nodes' sync modes when they differ, or is
// empty when every node that answered runs the same one. JetStream's sync
// mode is a server setting, and a replicated stream's acknowledgement
// means the message is in a quorum of its replicas: with one replica on an
// interval node, an "always" cluster's R3 ack can rest on page caches.
func syncDisagreement(nodes []semaq.ClusterNode) string {
	byMode := map[string][]string{}
	for _, n := range nodes {
		if n.Sync != "" {
			byMode[n.Sync] = append(byMode[n.Sync], n.Name)
		}
	}
	if len(byMode) < 2 {
		return ""
	}
	modes := make([]string, 0, len(byMode))
	for m := range byMode {
		modes = append(modes, m)
	}
	slices.Sort(modes)
	parts := make([]string, 0, len(modes))
	for _, m := range modes {
		names := byMode[m]
		slices.Sort(names)
		parts = append(parts, fmt.Sprintf("%s on %s", m, strings.Join(names, ", ")))
	}
	return "nodes disagree on sync (" + strings.Join(parts, "; ") + "): an acknowledgement of a replicated " +
		"stream promises only what the least durable node of its quorum does; give every node the same --sync " +
		"(docs/durability.md)"
}

// CheckModes asks every node for its report and returns the sync
// disagreement among them; complete is false when not every node this one
// routes to answered. The replica keeper calls it when the number of
// nodes changes, and logs what it says.
func (st *Status) CheckModes(ctx context.Context) (warning string, complete bool) {
	want := st.deps.Nodes()
	reports := st.gather(ctx)
	nodes := make([]semaq.ClusterNode, 0, len(reports))
	for _, r := range reports {
		nodes = append(nodes, r.ClusterNode)
	}
	return syncDisagreement(nodes), len(reports) >= want
}
