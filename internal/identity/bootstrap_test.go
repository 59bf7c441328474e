package identity_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/semaq"
)

// Two nodes starting together on an empty store both find no admin: the
// one whose bootstrap loses the race must start with the winner's admin,
// not fail, and must write no key (it has none: the winner's key is the
// only one, in the winner's data directory).
func TestBootstrapRaceLoserStarts(t *testing.T) {
	_, js := jstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	winner, err := identity.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer winner.Close(ctx)
	loser, err := identity.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The loser's snapshot stays empty, as a node that read the store
	// before the winner's write.
	if err := loser.Close(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wpath, lpath := filepath.Join(dir, "winner.key"), filepath.Join(dir, "loser.key")
	if created, err := winner.Bootstrap(ctx, wpath); err != nil || !created {
		t.Fatalf("winner: created %v, %v", created, err)
	}
	created, err := loser.Bootstrap(ctx, lpath)
	if err != nil || created {
		t.Fatalf("loser: created %v, %v; want false, nil", created, err)
	}
	if _, err := os.Stat(lpath); !os.IsNotExist(err) {
		t.Fatalf("the loser wrote a key file: %v", err)
	}
	b, err := os.ReadFile(wpath)
	if err != nil {
		t.Fatal(err)
	}
	p, err := winner.Authenticate(string(b[:len(b)-1]))
	if err != nil || p.Role != semaq.RoleAdmin {
		t.Fatalf("the winner's key: %+v, %v", p, err)
	}
}

// A user named admin that is not an admin does not pass for one: the
// bootstrap says why it cannot make the admin.
func TestBootstrapAdminNameTaken(t *testing.T) {
	_, js := jstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := identity.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := identity.Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Add(ctx, semaq.UserAddRequest{Name: "admin", Role: semaq.RoleReader, Subjects: []string{"ai.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Bootstrap(ctx, filepath.Join(t.TempDir(), "admin.key")); err == nil {
		t.Fatal("a reader named admin passed for the admin")
	}
}
