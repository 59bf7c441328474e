package modelcmd_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/cli"
)

// semaq runs the command against url: its exit status and output.
func semaq(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(append(args, "--server", url), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func must(t *testing.T, url, want string, args ...string) string {
	t.Helper()
	code, out, errOut := semaq(t, url, args...)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("semaq %s: exit %d, %q %q; want %q", strings.Join(args, " "), code, out, errOut, want)
	}
	return out
}

// The whole lifecycle through the CLI, as docs/models.md tells it.
func TestModelCommands(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	url := srv.ClientURL()
	must(t, url, "No model registered.", "model", "ls")
	must(t, url, "Model llama3 version v1 registered", "model", "register", "llama3", "--version", "v1")
	must(t, url, "Model llama3 version v2 registered", "model", "register", "llama3", "--version", "v2", "--labels", "quant=fp8")
	must(t, url, "figures recorded", "model", "report", "llama3", "v1", "--p95-ms", "400", "--memory-mb", "16000", "--cold-start-ms", "200")
	must(t, url, "v1 is active", "model", "promote", "llama3", "v1")
	must(t, url, "v2 is the canary of 10% of the traffic, sticky by session", "model", "promote", "llama3", "v2", "--canary", "10%")
	out := must(t, url, "llama3", "model", "ls")
	if !strings.Contains(out, "v2 10% by session") || !strings.Contains(out, "v1=active v2=canary") {
		t.Fatalf("ls: %q", out)
	}
	// The gate: v2 has no figures, then figures outside it.
	code, _, errOut := semaq(t, url, "model", "promote", "llama3", "v2")
	if code == 0 || !strings.Contains(errOut, "no figures reported for v2") {
		t.Fatalf("promote without figures: exit %d, %q", code, errOut)
	}
	must(t, url, "figures recorded", "model", "report", "llama3", "v2", "--p95-ms", "520", "--memory-mb", "16100", "--cold-start-ms", "210")
	code, _, errOut = semaq(t, url, "model", "promote", "llama3", "v2")
	if code == 0 || !strings.Contains(errOut, "p95 drift +30.0% (520ms against 400ms) is outside ±8%") {
		t.Fatalf("promote past the gate: exit %d, %q", code, errOut)
	}
	must(t, url, "v2 is active", "model", "promote", "llama3", "v2", "--force")
	must(t, url, "v1 is active", "model", "rollback", "llama3")
	must(t, url, "drained: no request in flight; it is retired", "model", "drain", "llama3", "v2")
	out = must(t, url, "ModelRetired", "model", "history", "llama3")
	for _, ev := range []string{"ModelRegistered", "ModelReported", "ModelCanary", "ModelValidated", "ModelDeployed", "ModelRolledBack"} {
		if !strings.Contains(out, ev) {
			t.Errorf("history lacks %s:\n%s", ev, out)
		}
	}
	if code, _, errOut := semaq(t, url, "model", "promote", "llama3", "v2", "--canary", "150%"); code == 0 || !strings.Contains(errOut, "less than 100%") {
		t.Fatalf("--canary 150%%: exit %d, %q", code, errOut)
	}
	if code, _, errOut := semaq(t, url, "model", "drain", "llama3", "v1"); code == 0 || !strings.Contains(errOut, "active version") {
		t.Fatalf("draining the active version: exit %d, %q", code, errOut)
	}

	// The states and calls, as a scrape shows them.
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range []string{
		`semaq_model_version_state{model="llama3",state="active",version="v1"} 1`,
		`semaq_model_version_state{model="llama3",state="retired",version="v2"} 1`,
		`semaq_model_ops_total{op="promote",result="gate_refused"} 2`,
		`semaq_model_ops_total{op="drain",result="conflict"} 1`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}
