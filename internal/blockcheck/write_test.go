package blockcheck

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/minio/highwayhash"
)

// writeBlock writes block index of stream under dir as nats-server 2.15
// lays records out (no headers): n records of a subject and body size
// bytes each, sequences from first.
func writeBlock(tb testing.TB, dir, stream string, index uint64, first uint64, n, size int) {
	tb.Helper()
	key := sha256.Sum256([]byte(fmt.Sprintf("%s-%d", stream, index)))
	hh, err := highwayhash.New64(key[:])
	if err != nil {
		tb.Fatal(err)
	}
	subj := []byte("fa.bench")
	body := make([]byte, size)
	le := binary.LittleEndian
	var buf []byte
	for i := range n {
		rl := recordHeader + len(subj) + len(body) + recordHash
		var hdr [recordHeader]byte
		le.PutUint32(hdr[0:], uint32(rl))
		le.PutUint64(hdr[4:], first+uint64(i))
		le.PutUint64(hdr[12:], uint64(1_700_000_000_000_000_000+i))
		le.PutUint16(hdr[20:], uint16(len(subj)))
		hh.Reset()
		hh.Write(hdr[4:20])
		hh.Write(subj)
		hh.Write(body)
		buf = append(buf, hdr[:]...)
		buf = append(buf, subj...)
		buf = append(buf, body...)
		buf = hh.Sum(buf)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.blk", index)), buf, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// The records writeBlock writes check out, and a flipped bit is found.
func TestWriteBlock(t *testing.T) {
	dir := t.TempDir()
	msgs := filepath.Join(dir, "jetstream", "$G", "streams", "FB", "msgs")
	if err := os.MkdirAll(msgs, 0o700); err != nil {
		t.Fatal(err)
	}
	writeBlock(t, msgs, "FB", 1, 1, 100, 50)
	writeBlock(t, msgs, "FB", 2, 101, 100, 50)
	if rep, err := Verify(dir, "FB"); err != nil || rep.Records != 200 || len(rep.Damage) != 0 {
		t.Fatalf("%+v %v", rep, err)
	}
	b, _ := os.ReadFile(filepath.Join(msgs, "1.blk"))
	b[1000] ^= 1
	_ = os.WriteFile(filepath.Join(msgs, "1.blk"), b, 0o600)
	if rep, _ := Verify(dir, "FB"); len(rep.Damage) != 1 || filepath.Base(rep.Damage[0].File) != "1.blk" {
		t.Fatalf("%+v", rep)
	}
}

// BenchmarkVerify reads a store of eight 8 MB blocks (1 KiB records, the
// harness's record size is ~100 bytes: see the 128 B case) from the page
// cache: the check's own cost, in MB/s. The cost from a cold disk is the
// disk's read rate (docs/faults.md, Defences).
func BenchmarkVerify(b *testing.B) {
	for _, size := range []int{128, 1024} {
		b.Run(fmt.Sprintf("record=%dB", size), func(b *testing.B) {
			dir := b.TempDir()
			msgs := filepath.Join(dir, "jetstream", "$G", "streams", "FB", "msgs")
			if err := os.MkdirAll(msgs, 0o700); err != nil {
				b.Fatal(err)
			}
			n := (8 << 20) / (size + recordHeader + recordHash + 8)
			for i := range 8 {
				writeBlock(b, msgs, "FB", uint64(i+1), uint64(i*n+1), n, size)
			}
			rep, err := Verify(dir, "FB")
			if err != nil || len(rep.Damage) != 0 {
				b.Fatal(rep, err)
			}
			b.SetBytes(rep.Bytes)
			b.ResetTimer()
			for b.Loop() {
				if _, err := Verify(dir, "FB"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A block nats-server compressed (compression: s2) is read through its
// compression, not taken for damage; a damaged compressed block is damage.
func TestVerifyCompressed(t *testing.T) {
	dir := t.TempDir()
	msgs := filepath.Join(dir, "jetstream", "$G", "streams", "FB", "msgs")
	if err := os.MkdirAll(msgs, 0o700); err != nil {
		t.Fatal(err)
	}
	writeBlock(t, msgs, "FB", 1, 1, 200, 100)
	path := filepath.Join(msgs, "1.blk")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// As nats-server's StoreCompression.Compress and MarshalMetadata
	// write it.
	var out bytes.Buffer
	w := s2.NewWriter(&out)
	if _, err := w.Write(raw[:len(raw)-recordHash]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	blk := binary.AppendUvarint([]byte{'c', 'm', 'p', 1}, uint64(len(raw)))
	blk = append(append(blk, out.Bytes()...), raw[len(raw)-recordHash:]...)
	if err := os.WriteFile(path, blk, 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, err := Verify(dir, "FB"); err != nil || rep.Records != 200 || len(rep.Damage) != 0 {
		t.Fatalf("compressed block: %+v %v", rep, err)
	}
	blk[len(blk)/2] ^= 0x40
	if err := os.WriteFile(path, blk, 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, _ := Verify(dir, "FB"); len(rep.Damage) != 1 {
		t.Fatalf("damaged compressed block: %+v", rep)
	}
}
