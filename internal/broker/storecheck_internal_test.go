package broker

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/blockcheck"
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
	s := &Server{cfg: Config{DataDir: dir, StoreCheck: blockcheck.ModeReport}, log: slog.New(slog.NewTextHandler(&out, nil))}
	if err := s.checkStore(); err != nil {
		t.Fatal(err)
	}
	log := out.String()
	for _, want := range []string{
		`level=ERROR msg="store check: damaged record: JetStream cuts the block there`,
		"1.blk offset=112 damage=\"invalid checksum (sequence 2 as written)\" last_block=false torn=false",
		"2.blk offset=0 damage=\"a record header cut short (10 bytes left)\" last_block=true torn=true",
		`msg="store check" mode=report streams=1 blocks=2 records=1 bytes=`, "damaged=2",
	} {
		if !strings.Contains(log, want) {
			t.Fatalf("log lacks %q:\n%s", want, log)
		}
	}
}

// store_check takes a mode by name, and the booleans it took before it had
// modes with their old meaning; anything else is refused by name.
func TestStoreCheckModeParsing(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want blockcheck.Mode
		err  string
	}{
		{"store_check: true", blockcheck.ModeReport, ""},
		{"store_check: false", blockcheck.ModeOff, ""},
		{"store_check: off", blockcheck.ModeOff, ""},
		{"store_check: report", blockcheck.ModeReport, ""},
		{"store_check: refuse", blockcheck.ModeRefuse, ""},
		{"store_check: Repair", blockcheck.ModeRepair, ""},
		{"store_check: \"false\"", blockcheck.ModeOff, ""},
		{"log_level: info", blockcheck.DefaultMode, ""},
		{"store_check: fix", "", `store_check: "fix" is not a mode`},
		{"store_check: 1", "", `store_check: "1" is not a mode`},
		{"store_check: [refuse]", "", "cannot unmarshal"},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		err := LoadConfigFile(path, &cfg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("%s: err %v, want one saying %q", tc.yaml, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		if cfg.StoreCheck != tc.want {
			t.Fatalf("%s: mode %q, want %q", tc.yaml, cfg.StoreCheck, tc.want)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
	}
	if blockcheck.DefaultMode != blockcheck.ModeRefuse {
		t.Fatalf("the default is %q", blockcheck.DefaultMode)
	}
	cfg := DefaultConfig()
	cfg.StoreCheck = "mend"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `store_check: "mend" is not a mode`) {
		t.Fatalf("Validate of a bad mode: %v", err)
	}
}
