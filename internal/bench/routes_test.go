package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The route rules of IngestConfig.Routes sit on each SemaQ target's
// subject, load, and leave every message where it was going: none
// matches, none fails to evaluate.
func TestAddRoutes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := startTestRig(t)
	if err := addRoutes(ctx, r, 3, DefaultTargets); err != nil {
		t.Fatal(err)
	}
	p, err := r.publisher(Targets[TargetSemaq], generatedBody(256), true, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	for range 5 {
		if err := p.publishSync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	routes, err := r.admin.Routes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 3 {
		t.Fatalf("%d rules stored, want 3: %+v", len(routes), routes)
	}
	for _, ri := range routes {
		if ri.Subject != semaqSubject || ri.Error != "" || ri.Stats.Matched != 0 || ri.Stats.Errors != 0 {
			t.Errorf("rule %s: subject %s, error %q, matched %d, failed %d", ri.Name, ri.Subject, ri.Error, ri.Stats.Matched, ri.Stats.Errors)
		}
	}
	st, err := operatorJS(t, r).Stream(ctx, semaqStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 5 {
		t.Fatalf("stream %s holds %d messages, want 5", semaqStream, n)
	}
	m, err := st.GetMsg(ctx, st.CachedInfo().State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(m.Subject, ".routed") {
		t.Fatalf("last message stored on %q: a rule routed it", m.Subject)
	}
}
