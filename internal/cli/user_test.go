package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

var keyLine = regexp.MustCompile(`(?m)^  (sq_\S+)$`)

// user add / ls / info / rm and key rotate against `semaq serve --auth`.
func TestUserCommands(t *testing.T) {
	dir := t.TempDir()
	srv := startChild(t, "--auth", "--data", dir, "--listen", "127.0.0.1:0", "--http", "")
	if strings.Contains(srv.output(), "sq_") {
		t.Fatal("the log shows a key")
	}
	if !strings.Contains(srv.output(), filepath.Join(dir, "admin.key")) {
		t.Fatalf("the log does not name the admin key file:\n%s", srv.output())
	}
	b, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(b))

	// No key, a wrong key: refused.
	mustFailSemaq(t, srv.url, "uthorization", "user", "ls")
	mustFailSemaq(t, srv.url, "not a SemaQ key", "user", "ls", "--key", "nope")

	out := mustSemaq(t, srv.url, "", "user", "add", "ingest-svc", "--tenant", "acme", "--role", "publisher",
		"--subjects", "ai.inference.>", "--key", admin)
	m := keyLine.FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "will not be shown again") {
		t.Fatalf("user add printed no key:\n%s", out)
	}
	ingest := m[1]
	mustSemaq(t, srv.url, "", "user", "add", "gpu-7", "--role", "worker", "--queues", "INFER_*", "--key", admin)
	t.Setenv("SEMAQ_KEY", admin)
	if r := runSemaq(t, srv.url, "", "user", "add", "--help"); strings.Contains(r.stdout+r.stderr, admin) {
		t.Fatal("--help prints $SEMAQ_KEY")
	}
	mustSemaq(t, srv.url, "", "user", "add", "alice", "--tenant", "acme", "--role", "reader", "--subjects", "results.acme.>",
		"--rpm", "600", "--tpm", "100000")
	mustFailSemaq(t, srv.url, "rpm: -1 is negative", "user", "add", "bob", "--role", "admin", "--rpm", "-1")
	mustFailSemaq(t, srv.url, "role:", "user", "add", "bob", "--role", "root")
	mustFailSemaq(t, srv.url, "subjects:", "user", "add", "bob", "--role", "reader", "--subjects", ">")
	mustFailSemaq(t, srv.url, "already exists", "user", "add", "alice", "--role", "reader", "--subjects", "x")

	ls := mustSemaq(t, srv.url, "", "user", "ls")
	for _, want := range []string{"NAME", "admin", "alice", "gpu-7", "INFER_*", "ingest-svc", "ai.inference.>"} {
		if !strings.Contains(ls, want) {
			t.Errorf("user ls lacks %q:\n%s", want, ls)
		}
	}
	if strings.Contains(ls, "sq_") {
		t.Error("user ls shows a key")
	}
	var users []semaq.UserInfo
	if err := json.Unmarshal([]byte(mustSemaq(t, srv.url, "", "user", "ls", "--json")), &users); err != nil || len(users) != 4 {
		t.Fatalf("user ls --json: %v %v", users, err)
	}
	if info := mustSemaq(t, srv.url, "", "user", "info", "alice"); !strings.Contains(info, "results.acme.>") ||
		!strings.Contains(info, "Quota:    600 requests/min (rpm), 100000 prompt tokens/min (tpm)") {
		t.Errorf("user info:\n%s", info)
	}
	if info := mustSemaq(t, srv.url, "", "user", "info", "gpu-7"); !strings.Contains(info, "Quota:    -") {
		t.Errorf("user info of a user without quota:\n%s", info)
	}
	if out := mustSemaq(t, srv.url, "", "user", "quota", "alice", "--tpm", "0"); !strings.Contains(out, "User alice: quota 600 requests/min (rpm).") {
		t.Errorf("user quota: %s", out)
	}
	mustFailSemaq(t, srv.url, "give --rpm, --tpm or both", "user", "quota", "alice")
	mustFailSemaq(t, srv.url, "rpm: -5 is negative", "user", "quota", "alice", "--rpm", "-5")
	mustFailSemaq(t, srv.url, "not found", "user", "quota", "nobody", "--rpm", "5")

	// A publisher's key works for what it may do and not for the user API.
	mustFailSemaq(t, srv.url, "", "user", "ls", "--key", ingest)
	out = mustSemaq(t, srv.url, "", "key", "rotate", "ingest-svc")
	m = keyLine.FindStringSubmatch(out)
	if m == nil || m[1] == ingest {
		t.Fatalf("key rotate printed no new key:\n%s", out)
	}
	mustFailSemaq(t, srv.url, "uthorization", "stream", "ls", "--key", ingest)
	mustSemaq(t, srv.url, "", "user", "info", "ingest-svc", "--key", admin)

	if out := mustSemaq(t, srv.url, "", "user", "rm", "alice"); !strings.Contains(out, "User alice removed.") {
		t.Errorf("user rm: %s", out)
	}
	mustFailSemaq(t, srv.url, "not found", "user", "info", "alice")
}

// Against a broker without auth, user commands say what is missing.
func TestUserCommandsNeedAuth(t *testing.T) {
	s := brokertest.Start(t)
	mustFailSemaq(t, s.ClientURL(), "start it with --auth", "user", "ls")
	mustFailSemaq(t, s.ClientURL(), "start it with --auth", "key", "rotate", "x")
}
