package client_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/client"
)

// Credential options that cannot go together are refused before dialing.
func TestCredentialOptionsRefused(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	seedFile := filepath.Join(t.TempDir(), "u.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	acctFile := filepath.Join(t.TempDir(), "a.nk")
	if err := os.WriteFile(acctFile, acctSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	key := "sq_bob_abcdefghijkl_" + strings.Repeat("A", 43)
	for _, tc := range []struct {
		name string
		opts []client.Option
		want string
	}{
		{"seed without user", []client.Option{client.WithNkeySeed(seedFile)}, "needs WithUser"},
		{"seed and key", []client.Option{client.WithNkeySeed(seedFile), client.WithUser("bob"), client.WithKey(key)}, "give one credential"},
		{"user and another user's key", []client.Option{client.WithUser("alice"), client.WithKey(key)}, `key of user "bob"`},
		{"bad user name", []client.Option{client.WithUser("a.b")}, "not a user name"},
		{"missing seed file", []client.Option{client.WithNkeySeed(filepath.Join(t.TempDir(), "none"))}, "not a file holding"},
		{"account seed", []client.Option{client.WithNkeySeed(acctFile)}, "not a file holding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Port 1 has no broker: a refusal must come from the options.
			_, err := client.Connect(context.Background(), "nats://127.0.0.1:1", tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want an error saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), string(seed)) {
				t.Fatal("the error quotes the seed")
			}
		})
	}
}
