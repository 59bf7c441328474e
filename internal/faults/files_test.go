package faults

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// store lays out the files of a node's JetStream store that Corrupt
// touches.
func store(t *testing.T) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	msgs := filepath.Join(dir, "jetstream", "ACC", "streams", "FA", "msgs")
	snaps := filepath.Join(dir, "jetstream", "$SYS", "_js_", "S-R3F-abc", "snapshots")
	for _, d := range []string{msgs, snaps} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	blk := []byte(strings.Repeat("message block ", 100))
	for path, b := range map[string][]byte{
		filepath.Join(msgs, "1.blk"):      blk,
		filepath.Join(msgs, "index.db"):   []byte("state"),
		filepath.Join(snaps, "snap.1.10"): []byte("snapshot"),
	} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, blk
}

func TestCorrupt(t *testing.T) {
	t.Run("flip a bit", func(t *testing.T) {
		dir, blk := store(t)
		if _, err := Corrupt(dir, "FA", FlipBit, 1); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "jetstream", "ACC", "streams", "FA", "msgs", "1.blk"))
		diff := 0
		for i := range got {
			for b := got[i] ^ blk[i]; b != 0; b &= b - 1 {
				diff++
			}
		}
		if len(got) != len(blk) || diff != 1 {
			t.Fatalf("%d bytes, %d bits changed; want the same length and one bit", len(got), diff)
		}
	})
	t.Run("truncate", func(t *testing.T) {
		dir, blk := store(t)
		if _, err := Corrupt(dir, "FA", Truncate, 2); err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(filepath.Join(dir, "jetstream", "ACC", "streams", "FA", "msgs", "1.blk"))
		if fi.Size() >= int64(len(blk)) {
			t.Fatalf("block still %d bytes", fi.Size())
		}
	})
	for f, path := range map[FileFault]string{
		DeleteIndex:    filepath.Join("jetstream", "ACC", "streams", "FA", "msgs", "index.db"),
		DeleteSnapshot: filepath.Join("jetstream", "$SYS", "_js_", "S-R3F-abc", "snapshots", "snap.1.10"),
	} {
		t.Run(string(f), func(t *testing.T) {
			dir, _ := store(t)
			if _, err := Corrupt(dir, "FA", f, 3); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, path)); !os.IsNotExist(err) {
				t.Fatalf("%s still there: %v", path, err)
			}
		})
	}
	t.Run("nothing to damage", func(t *testing.T) {
		if _, err := Corrupt(t.TempDir(), "FA", FlipBit, 1); !errors.Is(err, ErrNoFile) {
			t.Fatalf("empty store: %v, want ErrNoFile", err)
		}
	})
}
