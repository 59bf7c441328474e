package broker

import (
	"bytes"
	"errors"
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
	s := &Server{cfg: Config{DataDir: dir, StoreCheck: StoreCheckReport}, log: slog.New(slog.NewTextHandler(&out, nil))}
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
		want StoreCheckMode
		err  string
	}{
		{"store_check: true", StoreCheckReport, ""},
		{"store_check: false", StoreCheckOff, ""},
		{"store_check: off", StoreCheckOff, ""},
		{"store_check: report", StoreCheckReport, ""},
		{"store_check: refuse", StoreCheckRefuse, ""},
		{"store_check: Repair", StoreCheckRepair, ""},
		{"store_check: \"false\"", StoreCheckOff, ""},
		{"log_level: info", StoreCheckDefault, ""},
		{"store_check: fix", "", `store_check: "fix" is not a mode`},
		{"store_check: 1", "", `store_check: "1" is not a mode`},
		{"store_check: [refuse]", "", "want off, report, refuse or repair"},
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
	if StoreCheckDefault != StoreCheckRefuse {
		t.Fatalf("the default is %q", StoreCheckDefault)
	}
	cfg := DefaultConfig()
	cfg.StoreCheck = "mend"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `store_check: "mend" is not a mode`) {
		t.Fatalf("Validate of a bad mode: %v", err)
	}
}

// refuse stops the start naming the first damaged record; repair refuses
// the same way when nothing can catch the replica up: a node outside a
// cluster, or a stream of one replica. Nothing is moved.
func TestStoreCheckRefuses(t *testing.T) {
	blk, err := os.ReadFile(filepath.Join("..", "blockcheck", "testdata", "FA-1.blk"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stream := filepath.Join(dir, "jetstream", "$G", "streams", "FA")
	if err := os.MkdirAll(filepath.Join(stream, "msgs"), 0o700); err != nil {
		t.Fatal(err)
	}
	blk[len(blk)/2] ^= 1
	block := filepath.Join(stream, "msgs", "1.blk")
	if err := os.WriteFile(block, blk, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stream, "meta.inf"), []byte(`{"name":"FA","num_replicas":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		mode      StoreCheckMode
		clustered bool
		says      string
	}{
		{"refuse", StoreCheckRefuse, false, "this node is not clustered, so no other replica can catch the stream up"},
		{"the default, on a cluster", "", true, "start this node with store_check: repair"},
		{"repair on a single node", StoreCheckRepair, false, "store_check: repair needs the other replicas of a cluster: this node is not clustered"},
		{"repair of an R1 stream", StoreCheckRepair, true, "the stream has one replica, this one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{DataDir: dir, StoreCheck: tc.mode}
			if tc.clustered {
				cfg.ClusterName = "c"
			}
			var out bytes.Buffer
			s := &Server{cfg: cfg, log: slog.New(slog.NewTextHandler(&out, nil))}
			err := s.checkStore()
			if !errors.Is(err, ErrStoreDamaged) {
				t.Fatalf("err %v, want ErrStoreDamaged", err)
			}
			want := "store check: damaged record: stream FA (account $G), file " + block +
				" at byte 112: invalid checksum (sequence 2 as written); JetStream would cut the block there"
			if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err %q, want it to start %q and say %q", err, want, tc.says)
			}
			if _, err := os.Stat(block); err != nil {
				t.Fatalf("the replica was moved: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "quarantine")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a quarantine was made: %v", err)
			}
		})
	}
}
