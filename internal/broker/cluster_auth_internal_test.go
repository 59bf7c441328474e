package broker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRouteMismatchNamesTheSetting(t *testing.T) {
	for _, tc := range []struct{ mine, peer, want string }{
		{"auth=on,tls=mutual,secret=on", "semaq-node/auth=off,tls=mutual,secret=on", "auth=off there, auth=on here"},
		{"auth=on,tls=mutual,secret=on", "semaq-node/auth=on,tls=off,secret=on", "tls=off there, tls=mutual here"},
		{"auth=off,tls=off,secret=on", "semaq-node/auth=off,tls=off,secret=off", "secret=off there, secret=on here"},
		{"auth=on,tls=mutual,secret=on", "", "not a SemaQ node"},
		{"auth=on,tls=mutual,secret=on", "admin", "not a SemaQ node"},
	} {
		if got := routeMismatch(tc.mine, tc.peer); !strings.Contains(got, tc.want) {
			t.Errorf("routeMismatch(%q, %q) = %q, want it to say %q", tc.mine, tc.peer, got, tc.want)
		}
	}
}

func TestRouteCredentialsBindTheSettings(t *testing.T) {
	secret := []byte(strings.Repeat("s", MinClusterSecret))
	u1, p1 := routeCredentials("auth=on,tls=mutual,secret=on", secret)
	u2, p2 := routeCredentials("auth=off,tls=mutual,secret=on", secret)
	_, p3 := routeCredentials("auth=on,tls=mutual,secret=on", []byte(strings.Repeat("t", MinClusterSecret)))
	if u1 == u2 || p1 == p2 || p1 == p3 || len(p1) != 64 {
		t.Fatalf("credentials do not depend on settings and secret: %q %q %q %q %q", u1, u2, p1, p2, p3)
	}
	if _, p := routeCredentials("auth=off,tls=off,secret=off", nil); p != "" {
		t.Fatalf("a password without a secret: %q", p)
	}
}

func TestClusterSecretFileRules(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", strings.Repeat("a", 64)+"\n", 0o600)
	clustered := func(auth bool, secret string) Config {
		c := DefaultConfig()
		c.Name, c.ClusterName, c.ClusterListen = "n1", "c", "127.0.0.1:0"
		c.Routes = []string{"nats://127.0.0.1:6222"}
		c.Auth, c.ClusterSecretFile = auth, secret
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"auth without a secret", clustered(true, ""), "cluster_secret_file: a clustered node with auth needs"},
		{"no auth, no secret", clustered(false, ""), ""},
		{"good secret", clustered(true, good), ""},
		{"world-readable", clustered(true, write("open", strings.Repeat("a", 64), 0o644)), "readable by other users (mode 0644)"},
		{"too short", clustered(true, write("short", "abc", 0o600)), "at least 32 are needed"},
		{"too long", clustered(true, write("long", strings.Repeat("a", 5000), 0o600)), "at most 4096"},
		{"missing", clustered(true, filepath.Join(dir, "none")), "no such file"},
		{"not clustered", func() Config { c := DefaultConfig(); c.ClusterSecretFile = good; return c }(), "not clustered"},
	} {
		err := tc.cfg.checkClusterSecret()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
