package models

import (
	"fmt"
	"math"
	"testing"

	"github.com/semaq/semaq/semaq"
)

// A 10 % canary over 5,000 sessions lands within 10 % ± 2 points, each
// session always gets the same version, a larger share only adds
// sessions, and sticky by tenant keeps a tenant's sessions together.
func TestCanaryShareAndStickiness(t *testing.T) {
	info := &semaq.ModelInfo{Name: "llama3", Active: "v1", Canary: "v2", CanaryPercent: 10, Sticky: "session"}
	const n = 5000
	canary := map[string]bool{}
	for i := range n {
		env := &semaq.Envelope{Model: "llama3", Session: fmt.Sprintf("chat-%d", i)}
		v := pick(info, env)
		canary[env.Session] = v == "v2"
		for range 3 {
			if again := pick(info, env); again != v {
				t.Fatalf("session %s got %s, then %s", env.Session, v, again)
			}
		}
	}
	in := 0
	for _, c := range canary {
		if c {
			in++
		}
	}
	if share := 100 * float64(in) / n; math.Abs(share-10) > 2 {
		t.Fatalf("canary share %.2f%% of %d sessions, want 10%% ± 2", share, n)
	}
	info.CanaryPercent = 25
	for s, was := range canary {
		if was && pick(info, &semaq.Envelope{Model: "llama3", Session: s}) != "v2" {
			t.Fatalf("raising the share moved session %s off the canary", s)
		}
	}
	info.Sticky = "tenant"
	for _, tenant := range []string{"acme", "globex", "initech"} {
		want := pick(info, &semaq.Envelope{Model: "llama3", Tenant: tenant, Session: "a"})
		for i := range 50 {
			if got := pick(info, &semaq.Envelope{Model: "llama3", Tenant: tenant, Session: fmt.Sprint(i)}); got != want {
				t.Fatalf("tenant %s: session %d got %s, another %s", tenant, i, got, want)
			}
		}
	}
	if got := pick(info, &semaq.Envelope{Model: "llama3"}); got != "v1" {
		t.Fatalf("a request with no session or tenant got %s, want the active version", got)
	}
}

// BenchmarkPick is the canary pick the ingress makes per request of a
// registered model.
func BenchmarkPick(b *testing.B) {
	info := &semaq.ModelInfo{Name: "llama3", Active: "v1", Canary: "v2", CanaryPercent: 10, Sticky: "session"}
	env := &semaq.Envelope{Model: "llama3", Tenant: "acme", Session: "chat-4242"}
	b.ReportAllocs()
	for b.Loop() {
		_ = pick(info, env)
	}
}
