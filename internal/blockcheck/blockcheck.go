// Package blockcheck reads the message blocks of a stopped node's
// JetStream store and checks every record as nats-server 2.15 does when it
// rebuilds a block: its bounds, then its HighwayHash-64. nats-server checks
// only the last block of a stream at start (the others when a message is
// read), and cuts a block at its first bad record; records lost that way in
// a block that is not the last are not fetched again from the other
// replicas (docs/faults.md, Defences). The node runs it at start (Start,
// the config key store_check), and refuses to start or moves a damaged
// replica aside to be caught up (Quarantine); the fault harness runs it
// on every store after a run.
package blockcheck

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/compress/s2"
	"github.com/minio/highwayhash"
)

// The record layout of nats-server 2.15 message blocks (its file store:
// msgHdrSize, recordHashSize, hbit, tbit, ebit, rlBadThresh).
const (
	recordHeader = 22 // length, sequence, timestamp, subject length
	recordHash   = 8  // HighwayHash-64 of the record
	headersBit   = 1 << 31
	tombstoneBit = 1 << 62
	erasedBit    = 1 << 63
	maxRecord    = 32 << 20
	maxBlock     = 64 << 20 // past nats-server's largest block (8 MB)
)

// Damage is a record of a message block that does not check out.
type Damage struct {
	File   string
	Offset int
	Reason string
	// Torn is true when the record runs past the end of its file, as the
	// last record does when the process died while writing it.
	Torn bool
}

func (d Damage) String() string {
	return fmt.Sprintf("%s at byte %d: %s", d.File, d.Offset, d.Reason)
}

// Report is what VerifyBlocks found in one stream's store.
type Report struct {
	Blocks, Records int   // blocks read, records whose checksum holds
	Bytes           int64 // bytes read
	Damage          []Damage
	// Last is the path of the stream's last block: damage there is cut
	// by nats-server and, on a cluster, caught up from the leader.
	Last string
}

// Verify reads every message block of stream in the JetStream store
// of a stopped node under dataDir (its --data) and checks each record as
// nats-server does when it rebuilds a block: the record's bounds, then its
// HighwayHash-64, keyed with SHA-256 of "<stream>-<block index>", over its
// sequence, timestamp, subject, headers and body, and the headers' length,
// which the hash does not cover, as nats-server checks it when it reads the
// record. A block is read up to its
// first bad record, as nats-server would cut it there. Compressed or
// encrypted stores are not read (an error says so).
func Verify(dataDir, stream string) (Report, error) {
	dirs, err := filepath.Glob(filepath.Join(dataDir, "jetstream", "*", "streams", stream, "msgs"))
	if err != nil {
		return Report{}, err
	}
	return verifyDirs(dirs, stream)
}

// VerifyReplica is Verify for one account's replica of a stream.
func VerifyReplica(r Replica) (Report, error) {
	return verifyDirs([]string{filepath.Join(r.Dir, "msgs")}, r.Stream)
}

func verifyDirs(dirs []string, stream string) (Report, error) {
	var rep Report
	for _, dir := range dirs {
		if keys, _ := filepath.Glob(filepath.Join(dir, "*.key")); len(keys) > 0 {
			return rep, fmt.Errorf("blockcheck: %s is encrypted: not verified", dir)
		}
		blks, err := filepath.Glob(filepath.Join(dir, "*.blk"))
		if err != nil {
			return rep, err
		}
		sort.Slice(blks, func(i, j int) bool { return blockIndex(blks[i]) < blockIndex(blks[j]) })
		if len(blks) > 0 {
			rep.Last = blks[len(blks)-1]
		}
		for _, path := range blks {
			buf, err := os.ReadFile(path)
			if err != nil {
				return rep, err
			}
			rep.Blocks++
			rep.Bytes += int64(len(buf))
			buf, dmg := decompress(buf)
			n := 0
			if dmg == nil {
				n, dmg = verifyBlock(buf, stream, blockIndex(path))
			}
			rep.Records += n
			if dmg != nil {
				dmg.File = path
				rep.Damage = append(rep.Damage, *dmg)
			}
		}
	}
	return rep, nil
}

// decompress returns the records of a block nats-server compressed (a
// stream with compression: s2 compresses a block once it is full): the
// header "cmp", the algorithm (1, S2), the original size as a uvarint,
// then the records compressed but for the last 8 bytes (the last
// record's hash), kept as they are. A block without the header is
// returned as it is.
func decompress(buf []byte) ([]byte, *Damage) {
	if len(buf) < 5 || string(buf[:3]) != "cmp" || buf[3] != 1 {
		return buf, nil
	}
	_, n := binary.Uvarint(buf[4:])
	if n <= 0 || len(buf) < 4+n+recordHash {
		return nil, &Damage{Reason: "a compressed block's header does not hold"}
	}
	body := buf[4+n:]
	out, err := io.ReadAll(io.LimitReader(s2.NewReader(bytes.NewReader(body[:len(body)-recordHash])), maxBlock))
	if err != nil {
		return nil, &Damage{Reason: fmt.Sprintf("a compressed block does not decompress: %v", err)}
	}
	return append(out, body[len(body)-recordHash:]...), nil
}

// blockIndex is the number of a block file, <n>.blk.
func blockIndex(path string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".blk"), 10, 32)
	return n
}

// verifyBlock checks the records of one block: how many hold, and the
// first that does not.
func verifyBlock(buf []byte, stream string, index uint64) (int, *Damage) {
	key := sha256.Sum256([]byte(fmt.Sprintf("%s-%d", stream, index)))
	hh, err := highwayhash.New64(key[:])
	if err != nil {
		return 0, &Damage{Reason: err.Error()}
	}
	le := binary.LittleEndian
	good := 0
	for off := 0; off < len(buf); {
		if off+recordHeader > len(buf) {
			return good, &Damage{Offset: off, Reason: fmt.Sprintf("a record header cut short (%d bytes left)", len(buf)-off), Torn: true}
		}
		hdr := buf[off : off+recordHeader]
		rl, slen := int(le.Uint32(hdr[0:])), int(le.Uint16(hdr[20:]))
		hasHeaders := rl&headersBit != 0
		rl &^= headersBit
		shlen := slen
		if hasHeaders {
			shlen += 4
		}
		dlen := rl - recordHeader
		if dlen < 0 || shlen > dlen-recordHash || off+rl > len(buf) || rl > maxRecord {
			torn := dlen >= 0 && shlen <= dlen-recordHash && rl <= maxRecord // sane, but past the end
			return good, &Damage{Offset: off, Reason: fmt.Sprintf("record length %d does not fit (subject %d, %d bytes left)", rl, slen, len(buf)-off), Torn: torn}
		}
		data := buf[off+recordHeader : off+rl]
		if hasHeaders {
			// The headers' length is the one field of a record its hash
			// does not cover (the hash runs over headers and body as one):
			// nats-server refuses to read a record whose headers overrun
			// it, so such a record is lost to every reader, checksum or not.
			if hl := int(le.Uint32(data[slen:])); hl > dlen-recordHash-shlen {
				seq := le.Uint64(hdr[4:]) &^ (tombstoneBit | erasedBit)
				return good, &Damage{Offset: off, Reason: fmt.Sprintf("headers' length %d overruns the record (%d bytes for headers and body; sequence %d as written)", hl, dlen-recordHash-shlen, seq)}
			}
		}
		hh.Reset()
		hh.Write(hdr[4:20])
		hh.Write(data[:slen])
		if hasHeaders {
			hh.Write(data[slen+4 : dlen-recordHash])
		} else {
			hh.Write(data[slen : dlen-recordHash])
		}
		if !bytes.Equal(hh.Sum(nil), data[dlen-recordHash:]) {
			seq := le.Uint64(hdr[4:]) &^ (tombstoneBit | erasedBit)
			return good, &Damage{Offset: off, Reason: fmt.Sprintf("invalid checksum (sequence %d as written)", seq)}
		}
		good++
		off += rl
	}
	return good, nil
}

// Streams are the user streams of the store under dataDir: every stream of
// every account but the system account's Raft groups.
func Streams(dataDir string) ([]string, error) {
	dirs, err := filepath.Glob(filepath.Join(dataDir, "jetstream", "*", "streams", "*"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, d := range dirs {
		if name := filepath.Base(d); !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}
