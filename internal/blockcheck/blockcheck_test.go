package blockcheck

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/FA-1.blk is the start of block 1 of a stream FA written by
// nats-server 2.15.2 (a run of TestFaults): three messages with headers.
func blockStore(t *testing.T, spoil func([]byte) []byte) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "FA-1.blk"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	msgs := filepath.Join(dir, "jetstream", "$G", "streams", "FA", "msgs")
	if err := os.MkdirAll(msgs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(msgs, "1.blk"), spoil(b), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spoil   func([]byte) []byte
		records int
		says    string // "" when undamaged
	}{
		{"as nats-server wrote it", func(b []byte) []byte { return b }, 3, ""},
		{"a bit flipped in the second record's body", func(b []byte) []byte {
			b[len(b)/2] ^= 0x10
			return b
		}, 1, "invalid checksum"},
		{"a bit flipped in the second record's headers' length", func(b []byte) []byte {
			// Outside the hash: the checksum holds, nats-server cannot read
			// the record (a fault run's n3 lost a record so).
			rl := int(binary.LittleEndian.Uint32(b) &^ headersBit)
			slen := int(binary.LittleEndian.Uint16(b[rl+20:]))
			b[rl+recordHeader+slen+1] ^= 0x01 // 256 bytes longer
			return b
		}, 1, "headers' length"},
		{"cut in the last record", func(b []byte) []byte { return b[:len(b)-5] }, 2, "does not fit"},
		{"cut in a record header", func(b []byte) []byte { return b[:len(b)/3+3] }, 1, "cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := Verify(blockStore(t, tc.spoil), "FA")
			if err != nil {
				t.Fatal(err)
			}
			if rep.Blocks != 1 || rep.Records != tc.records {
				t.Fatalf("%d blocks, %d good records; want 1 and %d (%v)", rep.Blocks, rep.Records, tc.records, rep.Damage)
			}
			if rep.Last == "" || filepath.Base(rep.Last) != "1.blk" {
				t.Fatalf("last block %q", rep.Last)
			}
			if tc.records == 3 {
				if len(rep.Damage) != 0 {
					t.Fatalf("damage found in an intact block: %v", rep.Damage)
				}
				return
			}
			if len(rep.Damage) != 1 || !strings.Contains(rep.Damage[0].String(), tc.says) {
				t.Fatalf("damage %v, want one saying %q", rep.Damage, tc.says)
			}
			if torn := tc.says != "invalid checksum" && tc.says != "headers' length"; rep.Damage[0].Torn != torn {
				t.Fatalf("damage %+v: torn %v, want %v", rep.Damage[0], rep.Damage[0].Torn, torn)
			}
		})
	}
	// The key is the stream's name: the same bytes under another name do
	// not check out.
	dir := blockStore(t, func(b []byte) []byte { return b })
	if err := os.Rename(filepath.Join(dir, "jetstream", "$G", "streams", "FA"), filepath.Join(dir, "jetstream", "$G", "streams", "FB")); err != nil {
		t.Fatal(err)
	}
	if rep, _ := Verify(dir, "FB"); len(rep.Damage) != 1 {
		t.Fatalf("a block checked with another stream's key: %+v", rep)
	}
}

func TestStreams(t *testing.T) {
	dir := blockStore(t, func(b []byte) []byte { return b })
	if err := os.MkdirAll(filepath.Join(dir, "jetstream", "SQ_PUBLIC", "streams", "B"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := Streams(dir)
	if err != nil || strings.Join(got, ",") != "B,FA" {
		t.Fatalf("streams %v, %v; want B,FA", got, err)
	}
}
