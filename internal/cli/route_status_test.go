package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/semaq/semaq/semaq"
)

func TestRouteAdaptiveStatus(t *testing.T) {
	t.Parallel()
	url := startRouting(t)
	out := mustSemaq(t, url, "", "route", "add", "pool", "--subject", "ai.pool", "--split", "gpu.cluster-a=50,gpu.cluster-b=50", "--adaptive")
	if want := "Route pool added: ai.pool -> gpu.cluster-a=50,gpu.cluster-b=50 adaptive"; strings.TrimSpace(out) != want {
		t.Fatalf("add printed %q, want %q", out, want)
	}
	if s := pubStream(t, url, "ai.pool", "hi"); s != "GPUA" && s != "GPUB" {
		t.Fatalf("routed to %s", s)
	}
	if out := mustSemaq(t, url, "", "route", "ls"); !strings.Contains(out, "gpu.cluster-a=50,gpu.cluster-b=50 adaptive") {
		t.Fatalf("ls:\n%s", out)
	}
	out = mustSemaq(t, url, "", "route", "status", "pool")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[1], "Matched 1") || !strings.HasPrefix(lines[2], "TARGET") ||
		!strings.Contains(lines[2], "EFFECTIVE") || !strings.HasPrefix(lines[3], "gpu.cluster-a") {
		t.Fatalf("status:\n%s", out)
	}
	var info semaq.RouteInfo
	if err := json.Unmarshal([]byte(mustSemaq(t, url, "", "route", "status", "pool", "--json")), &info); err != nil {
		t.Fatal(err)
	}
	if !info.Adaptive || len(info.Health) != 2 || info.Health[1].Subject != "gpu.cluster-b" || info.Health[1].Effective != 50 {
		t.Fatalf("status --json = %+v", info)
	}

	mustFailSemaq(t, url, "route nope not found", "route", "status", "nope")
	mustFailSemaq(t, url, "--adaptive needs --split", "route", "add", "x", "--subject", "ai.x", "--to", "gpu.cluster-a", "--adaptive")
}
