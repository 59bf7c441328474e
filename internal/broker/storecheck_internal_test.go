package broker

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The store check names every damaged record as the loss it is, a
// cut-short tail of the last block too.
func TestCheckStore(t *testing.T) {
	blk, err := os.ReadFile(filepath.Join("..", "blockcheck", "testdata", "FA-1.blk"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	msgs := filepath.Join(dir, "jetstream", "$G", "streams", "FA", "msgs")
	if err := os.MkdirAll(msgs, 0o700); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), blk...)
	bad[len(bad)/2] ^= 1
	// Block 1 damaged, block 2 (the last, written under its own key) cut
	// short.
	if err := os.WriteFile(filepath.Join(msgs, "1.blk"), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(msgs, "2.blk"), blk[:10], 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s := &Server{cfg: Config{DataDir: dir, StoreCheck: true}, log: slog.New(slog.NewTextHandler(&out, nil))}
	s.checkStore()
	log := out.String()
	for _, want := range []string{
		`level=ERROR msg="store check: damaged record: JetStream cuts the block there`,
		"1.blk offset=112 damage=\"invalid checksum (sequence 2 as written)\" last_block=false torn=false",
		"2.blk offset=0 damage=\"a record header cut short (10 bytes left)\" last_block=true torn=true",
		`msg="store check" streams=1 blocks=2 records=1 damaged=2`,
	} {
		if !strings.Contains(log, want) {
			t.Fatalf("log lacks %q:\n%s", want, log)
		}
	}
}
