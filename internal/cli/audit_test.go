package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

func TestAuditLs(t *testing.T) {
	srv := brokertest.Start(t)
	url := srv.ClientURL()
	if out := mustSemaq(t, url, "", "audit", "ls"); out != "No audit records.\n" {
		t.Fatalf("audit ls on a new broker: %q", out)
	}
	mustSemaq(t, url, "", "stream", "add", "AI", "--subjects", "ai.>")
	mustSemaq(t, url, "", "stream", "add", "EV", "--subjects", "ev.>")
	mustFailSemaq(t, url, "already exists", "stream", "add", "AI", "--subjects", "ai.>")
	mustSemaq(t, url, "", "stream", "rm", "EV")

	ls := mustSemaq(t, url, "", "audit", "ls")
	lines := strings.Split(strings.TrimSpace(ls), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "TIME") {
		t.Fatalf("audit ls:\n%s", ls)
	}
	for i, want := range []string{"stream.create  AI", "stream.create  EV", "stream.create  AI", "stream.delete  EV"} {
		if !strings.Contains(lines[i+1], want) || !strings.Contains(lines[i+1], "anonymous") {
			t.Errorf("line %d %q lacks %q", i+1, lines[i+1], want)
		}
	}
	if !strings.Contains(lines[3], "refused: stream AI already exists") {
		t.Errorf("the refused create: %q", lines[3])
	}

	var recs []semaq.AuditRecord
	out := mustSemaq(t, url, "", "audit", "ls", "--json", "--op", "stream.delete", "--since", "1h", "--user", "anonymous")
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(recs) != 1 || recs[0].Target != "EV" || recs[0].Before == nil || recs[0].After != nil {
		t.Fatalf("audit ls --op stream.delete: %+v", recs)
	}
	if out := mustSemaq(t, url, "", "audit", "ls", "--user", "alice"); out != "No audit records.\n" {
		t.Fatalf("audit ls --user alice: %q", out)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if out := mustSemaq(t, url, "", "audit", "ls", "--since", future); out != "No audit records.\n" {
		t.Fatalf("audit ls --since %s: %q", future, out)
	}
	r := runSemaq(t, url, "", "audit", "ls", "--limit", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "stream.delete") || strings.Count(r.stdout, "\n") != 2 || !strings.Contains(r.stderr, "Older records match") {
		t.Fatalf("audit ls --limit 1: %+v", r)
	}
	mustFailSemaq(t, url, "--limit 0", "audit", "ls", "--limit", "0")
	mustFailSemaq(t, url, "--since", "audit", "ls", "--since", "yesterday")
	mustFailSemaq(t, url, "is not an operation", "audit", "ls", "--op", "stream.explode")
}
