package bench

import (
	"context"
	"fmt"

	"github.com/semaq/semaq/semaq"
)

// MaxRoutes bounds IngestConfig.Routes.
const MaxRoutes = 100

// addRoutes stores n route rules on the publish subject of each SemaQ
// target measured, as a deployment that routes some of its traffic
// elsewhere has: each rule's condition reads the model header and is
// false for the scenario's messages, so the ingress evaluates every rule
// on every message and none moves it. The rules target a subject of the
// same stream, so nothing else has to exist. AddRoute returns once the
// broker routes by the rule.
func addRoutes(ctx context.Context, r *Rig, n int, targets []string) error {
	for _, name := range targets {
		t := Targets[name]
		if t.Stream == "" {
			continue
		}
		for i := range n {
			rule := semaq.Route{
				Name:    fmt.Sprintf("bench-%s-%d", t.Stream, i),
				Subject: t.subject,
				When:    fmt.Sprintf(`model.startsWith("bench-never-%d")`, i),
				To:      t.subject + ".routed",
				Order:   i,
			}
			if _, err := r.admin.AddRoute(ctx, rule); err != nil {
				return fmt.Errorf("bench: route rule %s on %s: %w", rule.Name, t.subject, err)
			}
		}
	}
	return nil
}
