package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/internal/brokertest"
)

// user add --nkey / --cert-subject, and a command connecting with
// --nkey-seed and --auth-user.
func TestNkeyAndCertUserCommands(t *testing.T) {
	s := brokertest.Start(t, brokertest.WithAuth)
	url := s.ClientURL()
	t.Setenv("SEMAQ_KEY", brokertest.AdminKey(t, s))
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "ops.nk")
	brokertest.WriteFile(t, seedFile, seed)

	out := mustSemaq(t, url, "", "user", "add", "ops", "--role", "admin", "--nkey", pub)
	if !strings.Contains(out, "no key") || !strings.Contains(out, pub) || strings.Contains(out, "sq_") {
		t.Fatalf("user add --nkey:\n%s", out)
	}
	out = mustSemaq(t, url, "", "user", "add", "etl", "--role", "publisher", "--subjects", "etl.>", "--cert-subject", "cn=etl, o=acme")
	if !strings.Contains(out, "CN=etl,O=acme") || strings.Contains(out, "sq_") {
		t.Fatalf("user add --cert-subject:\n%s", out)
	}
	if info := mustSemaq(t, url, "", "user", "info", "ops"); !strings.Contains(info, "Nkey:     "+pub) {
		t.Errorf("user info:\n%s", info)
	}
	if ls := mustSemaq(t, url, "", "user", "ls"); !strings.Contains(ls, "nkey "+pub) || !strings.Contains(ls, "cert CN=etl,O=acme") {
		t.Errorf("user ls:\n%s", ls)
	}
	mustFailSemaq(t, url, "this looks like a seed", "user", "add", "x", "--role", "admin", "--nkey", string(seed))
	mustFailSemaq(t, url, "cert_subject: ", "user", "add", "x", "--role", "admin", "--cert-subject", "CN=a;O=b")

	// The nkey user, by flag or by variable; $SEMAQ_KEY is not read then.
	mustSemaq(t, url, "", "user", "ls", "--nkey-seed", seedFile, "--auth-user", "ops")
	t.Setenv("SEMAQ_KEY", "")
	t.Setenv("SEMAQ_NKEY_SEED", seedFile)
	t.Setenv("SEMAQ_USER", "ops")
	mustSemaq(t, url, "", "stream", "ls")
	mustFailSemaq(t, url, "uthorization", "stream", "ls", "--auth-user", "etl")
	t.Setenv("SEMAQ_USER", "")
	mustFailSemaq(t, url, "--nkey-seed needs --auth-user", "stream", "ls")
	mustFailSemaq(t, url, "not a file holding", "stream", "ls", "--auth-user", "ops", "--nkey-seed", filepath.Join(t.TempDir(), "none"))
}
