package broker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/semaq/semaq/semaq"
)

// The tenants a node writes are those it reads at its next start; lines
// that are not tenant names are skipped and counted, and a file past its
// bound is refused rather than read.
func TestKnownTenantsFile(t *testing.T) {
	dir := t.TempDir()
	if got, skipped, err := readKnownTenants(dir); err != nil || got != nil || skipped != 0 {
		t.Fatalf("no file: %v, %d skipped, %v; want none", got, skipped, err)
	}
	if err := writeKnownTenants(dir, []string{"acme", "globex"}); err != nil {
		t.Fatal(err)
	}
	if err := writeKnownTenants(dir, []string{"acme", "globex", "initech"}); err != nil {
		t.Fatal(err)
	}
	got, skipped, err := readKnownTenants(dir)
	if err != nil || skipped != 0 || !slices.Equal(got, []string{"acme", "globex", "initech"}) {
		t.Fatalf("read back: %v, %d skipped, %v", got, skipped, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("data directory holds %d files after two writes, want only %s", len(entries), TenantsFile)
	}

	path := filepath.Join(dir, TenantsFile)
	hostile := "zeta\n\nacme\r\n../../etc\nSQ_T_x y\n" + strings.Repeat("a", semaq.MaxNameLen+1) + "\n$G\nacme\n\xff\xfe"
	if err := os.WriteFile(path, []byte(hostile), 0o600); err != nil {
		t.Fatal(err)
	}
	got, skipped, err = readKnownTenants(dir)
	if err != nil || skipped != 5 || !slices.Equal(got, []string{"acme", "zeta"}) {
		t.Fatalf("hostile file: %v, %d skipped, %v; want [acme zeta], 5 skipped", got, skipped, err)
	}

	if err := os.WriteFile(path, make([]byte, maxTenantsFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _, err := readKnownTenants(dir); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized file: %v, %v; want a refusal", got, err)
	}
}

// Whatever the file holds, a start registers only accounts of valid
// tenant names, each once.
func FuzzParseKnownTenants(f *testing.F) {
	f.Add([]byte("acme\nglobex\n"))
	f.Add([]byte("acme\r\n\n  globex  \nacme"))
	f.Add([]byte("$G\n../x\n\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, skipped := parseKnownTenants(b)
		if skipped < 0 || len(got)+skipped > len(b) {
			t.Fatalf("%d tenants and %d skipped from %d bytes", len(got), skipped, len(b))
		}
		for i, name := range got {
			if err := semaq.CheckName(name); err != nil {
				t.Fatalf("tenant %q: %v", name, err)
			}
			if i > 0 && got[i-1] >= name {
				t.Fatalf("tenants %v not sorted and unique", got)
			}
		}
	})
}
