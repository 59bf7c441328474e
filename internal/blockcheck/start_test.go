package blockcheck

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// refuse stops the start naming the first damaged record; repair refuses
// the same way when nothing can catch the replica up: a node outside a
// cluster, or a stream of one replica. Nothing is moved.
func TestModeRefuses(t *testing.T) {
	blk, err := os.ReadFile(filepath.Join("testdata", "FA-1.blk"))
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
		mode      Mode
		clustered bool
		says      string
	}{
		{"refuse", ModeRefuse, false, "this node is not clustered, so no other replica can catch the stream up"},
		{"the default, on a cluster", "", true, "start this node with store_check: repair"},
		{"repair on a single node", ModeRepair, false, "store_check: repair needs the other replicas of a cluster: this node is not clustered"},
		{"repair of an R1 stream", ModeRepair, true, "the stream has one replica, this one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			st := Start{DataDir: dir, Mode: tc.mode, Clustered: tc.clustered, Log: slog.New(slog.NewTextHandler(&out, nil))}
			res, err := st.Run()
			if !res.Ran || res.Damaged != 1 || res.Repaired != 0 {
				t.Fatalf("outcome %+v", res)
			}
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("err %v, want ErrDamaged", err)
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

// repair on a cluster moves the damaged replica into the quarantine and
// says so; with no Raft group found for it, it warns that the log stays.
func TestStartRepairs(t *testing.T) {
	blk, err := os.ReadFile(filepath.Join("testdata", "FA-1.blk"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stream := filepath.Join(dir, "jetstream", "$G", "streams", "FA")
	if err := os.MkdirAll(filepath.Join(stream, "msgs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stream, "msgs", "1.blk"), blk[:len(blk)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stream, "meta.inf"), []byte(`{"name":"FA","num_replicas":3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	res, err := Start{DataDir: dir, Mode: ModeRepair, Clustered: true, Log: slog.New(slog.NewTextHandler(&log, nil))}.Run()
	if err != nil || res.Damaged != 1 || res.Repaired != 1 {
		t.Fatalf("outcome %+v, %v\n%s", res, err, log.String())
	}
	if _, err := os.Stat(stream); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the damaged replica stayed: %v", err)
	}
	q, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", "jetstream", "$G", "streams", "FA", "msgs", "1.blk"))
	if len(q) != 1 {
		t.Fatalf("quarantine %v", q)
	}
	for _, want := range []string{"no Raft group of the stream found", `msg="store check: damaged replica moved aside`, "stream=FA"} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, log.String())
		}
	}
}
