package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// startRouting starts a broker with streams AI (ai.>), GPUA (gpu.cluster-a)
// and GPUB (gpu.cluster-b).
func startRouting(t *testing.T) string {
	t.Helper()
	url := brokertest.Start(t).ClientURL()
	mustSemaq(t, url, "", "stream", "add", "AI", "--subjects", "ai.>")
	mustSemaq(t, url, "", "stream", "add", "GPUA", "--subjects", "gpu.cluster-a")
	mustSemaq(t, url, "", "stream", "add", "GPUB", "--subjects", "gpu.cluster-b")
	return url
}

func pubStream(t *testing.T, url string, args ...string) string {
	t.Helper()
	var ack struct{ Stream string }
	out := mustSemaq(t, url, "", append([]string{"pub"}, append(args, "--json")...)...)
	if err := json.Unmarshal([]byte(out), &ack); err != nil {
		t.Fatalf("pub --json: %v\n%s", err, out)
	}
	return ack.Stream
}

func TestRouteCommands(t *testing.T) {
	t.Parallel()
	url := startRouting(t)
	out := mustSemaq(t, url, "", "route", "ls")
	if strings.TrimSpace(out) != "No routes." {
		t.Fatalf("ls with no routes: %q", out)
	}
	out = mustSemaq(t, url, "", "route", "add", "llama", "--subject", "ai.inference.llm", "--when", `model.startsWith("llama3")`, "--to", "gpu.cluster-a")
	if want := `Route llama added: ai.inference.llm when model.startsWith("llama3") -> gpu.cluster-a`; strings.TrimSpace(out) != want {
		t.Fatalf("add printed %q, want %q", out, want)
	}
	mustSemaq(t, url, "", "route", "add", "gemma", "--subject", "ai.inference.llm", "--when", `model.startsWith("gemma2")`, "--to", "gpu.cluster-b", "--order", "5")
	mustSemaq(t, url, "", "route", "add", "ab", "--subject", "ai.ab", "--split", "gpu.cluster-a=70, gpu.cluster-b=30", "--sticky-key", "tenant", "--order", "9")

	if s := pubStream(t, url, "ai.inference.llm", "hi", "--model", "llama3-70b"); s != "GPUA" {
		t.Fatalf("llama3 stored in %s", s)
	}
	if s := pubStream(t, url, "ai.inference.llm", "hi", "--model", "gemma2-9b"); s != "GPUB" {
		t.Fatalf("gemma2 stored in %s", s)
	}
	if s := pubStream(t, url, "ai.inference.llm", "hi", "--model", "mistral"); s != "AI" {
		t.Fatalf("mistral stored in %s", s)
	}

	out = mustSemaq(t, url, "", "route", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ORDER") || !strings.Contains(lines[1], "llama") ||
		!strings.Contains(lines[2], "gemma") || !strings.Contains(lines[3], "gpu.cluster-a=70,gpu.cluster-b=30 sticky on tenant") {
		t.Fatalf("ls:\n%s", out)
	}
	var routes []semaq.RouteInfo
	if err := json.Unmarshal([]byte(mustSemaq(t, url, "", "route", "ls", "--json")), &routes); err != nil {
		t.Fatal(err)
	}
	if len(routes) != 3 || routes[0].Name != "llama" || routes[0].Stats.Matched != 1 || routes[1].Stats.Matched != 1 ||
		routes[2].Split[1] != (semaq.RouteSplit{Subject: "gpu.cluster-b", Weight: 30}) || routes[2].Stats.Targets == nil {
		t.Fatalf("ls --json = %+v", routes)
	}

	// test: exit 0 when the message would be stored, routed or not.
	out = mustSemaq(t, url, "", "route", "test", "--subject", "ai.inference.llm", "--model", "gemma2-2b", `{"prompt":"hi"}`)
	if !strings.Contains(out, "llama") || !strings.Contains(out, "false") ||
		!strings.Contains(out, "Routed by gemma to gpu.cluster-b (stream GPUB)") {
		t.Fatalf("test output:\n%s", out)
	}
	out = mustSemaq(t, url, "", "route", "test", "--subject", "ai.ab", "-H", "AI-Tenant=acme")
	if !strings.Contains(out, "Routed by ab to gpu.cluster-") || !strings.Contains(out, `sticky key "acme"`) ||
		!strings.Contains(out, "other_subject") {
		t.Fatalf("test output:\n%s", out)
	}
	out = mustSemaq(t, url, "", "route", "test", "--subject", "ai.other")
	if !strings.Contains(out, "No rule matched: stored on ai.other (stream AI)") {
		t.Fatalf("test output:\n%s", out)
	}
	var res semaq.RouteTestResponse
	if err := json.Unmarshal([]byte(mustSemaq(t, url, "{\"confidence\":1}", "route", "test", "--subject", "ai.inference.llm", "--model", "llama3", "--json", "-")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Route != "llama" || res.Target != "gpu.cluster-a" || res.Stream != "GPUA" || len(res.Trials) != 1 {
		t.Fatalf("test --json = %+v", res)
	}

	// Exit 1: the publish would be refused.
	r := runSemaq(t, url, "", "route", "test", "--subject", "ai.inference.llm", "--priority", "9", "-H", "AI-Timeout=soon")
	if r.code != 1 || !strings.Contains(r.stdout, "Refused: invalid header AI-Timeout") || !strings.Contains(r.stderr, "would be refused") {
		t.Fatalf("bad envelope test: %+v", r)
	}
	mustSemaq(t, url, "", "stream", "rm", "GPUA")
	r = runSemaq(t, url, "", "route", "test", "--subject", "ai.inference.llm", "--model", "llama3")
	if r.code != 1 || !strings.Contains(r.stdout, "no stream captures it") || !strings.Contains(r.stderr, "route llama") {
		t.Fatalf("target gone test: %+v", r)
	}
	mustFailSemaq(t, url, "route llama sends messages on ai.inference.llm to gpu.cluster-a, which no stream captures",
		"pub", "ai.inference.llm", "x", "--model", "llama3")

	// Exit 2: the test could not run.
	for _, args := range [][]string{
		{"route", "test", "ai.x"},
		{"route", "test", "--subject", "ai.x", "--bogus"},
		{"route", "test", "--subject", "ai.x", "a", "b"},
		{"route", "test", "--subject", "ai.*"},
	} {
		if r := runSemaq(t, url, "", args...); r.code != 2 || !strings.HasPrefix(lastLine(r.stderr), "semaq: ") {
			t.Fatalf("%v: %+v, want exit 2", args, r)
		}
	}
	if r := runSemaq(t, unreachableURL, "", "route", "test", "--subject", "ai.x"); r.code != 2 {
		t.Fatalf("unreachable broker: %+v", r)
	}

	out = mustSemaq(t, url, "", "route", "rm", "llama")
	if strings.TrimSpace(out) != "Route llama removed" {
		t.Fatalf("rm printed %q", out)
	}
	if s := pubStream(t, url, "ai.inference.llm", "hi", "--model", "llama3"); s != "AI" {
		t.Fatalf("after rm, llama3 stored in %s", s)
	}
	mustFailSemaq(t, url, "route llama not found", "route", "rm", "llama")
}

func TestRouteAddErrors(t *testing.T) {
	t.Parallel()
	url := startRouting(t)
	// Refused by the broker, exit 1 with its reason.
	mustFailSemaq(t, url, "route bad: when: 1:1: undeclared reference to 'modle'",
		"route", "add", "bad", "--subject", "ai.>", "--when", `modle == "x"`, "--to", "gpu.cluster-a")
	mustFailSemaq(t, url, "no stream captures target subject gpu.cluster-c",
		"route", "add", "bad", "--subject", "ai.>", "--to", "gpu.cluster-c")
	mustSemaq(t, url, "", "route", "add", "ok", "--subject", "ai.>", "--to", "gpu.cluster-a")
	mustFailSemaq(t, url, "already exists", "route", "add", "ok", "--subject", "ai.>", "--to", "gpu.cluster-b")
	mustSemaq(t, url, "", "route", "add", "ok", "--subject", "ai.>", "--to", "gpu.cluster-b", "--replace")
	if s := pubStream(t, url, "ai.x", "hi"); s != "GPUB" {
		t.Fatalf("after replace stored in %s", s)
	}
	// Refused before dialling: the broker is unreachable.
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"not both", []string{"--subject", "ai.>", "--to", "gpu.a", "--split", "gpu.a=1,gpu.b=1"}},
		{"--to SUBJECT or --split", []string{"--subject", "ai.>"}},
		{"--subject", []string{"--to", "gpu.a"}},
		{"--sticky-key needs --split", []string{"--subject", "ai.>", "--to", "gpu.a", "--sticky-key", "tenant"}},
		{"weight \"0\" of gpu.a", []string{"--subject", "ai.>", "--split", "gpu.a=0,gpu.b=1"}},
		{"weight \"x\"", []string{"--subject", "ai.>", "--split", "gpu.a=x,gpu.b=1"}},
		{"want SUBJ=WEIGHT", []string{"--subject", "ai.>", "--split", "gpu.a,gpu.b=1"}},
		{"at least two targets", []string{"--subject", "ai.>", "--split", "gpu.a=1"}},
	} {
		mustFailSemaq(t, unreachableURL, tc.want, append([]string{"route", "add", "x"}, tc.args...)...)
	}
	mustFailSemaq(t, unreachableURL, "route name", "route", "add", "a.b", "--subject", "ai.>", "--to", "gpu.a")
}
