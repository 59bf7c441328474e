package faults

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
)

// ErrNoFile is returned by Corrupt when the store holds no file the fault
// applies to (a stream not written yet, a group never snapshotted).
var ErrNoFile = errors.New("faults: no file to damage")

// Corrupt applies f to the JetStream store of a stopped node under dataDir
// (the node's --data) for stream, choosing the file and the place from
// seed, and says what it did.
func Corrupt(dataDir, stream string, f FileFault, seed uint64) (string, error) {
	r := rand.New(rand.NewPCG(seed, seed^0xf11e))
	msgs := filepath.Join(dataDir, "jetstream", "*", "streams", stream, "msgs")
	var pattern []string
	switch f {
	case FlipBit, Truncate:
		pattern = []string{filepath.Join(msgs, "*.blk")}
	case DeleteIndex:
		// The stream's state file (written at a clean stop and now and
		// then) and its consumers' state.
		obs := filepath.Join(dataDir, "jetstream", "*", "streams", stream, "obs", "*", "o.dat")
		pattern = []string{filepath.Join(msgs, "index.db"), obs}
	case DeleteSnapshot:
		groups := filepath.Join(dataDir, "jetstream", "$SYS", "_js_")
		pattern = []string{filepath.Join(groups, "S-*", "snapshots", "*"), filepath.Join(groups, "C-*", "snapshots", "*")}
	default:
		return "", fmt.Errorf("faults: unknown file fault %q", f)
	}
	var files []string
	for _, p := range pattern {
		m, err := filepath.Glob(p)
		if err != nil {
			return "", err
		}
		files = append(files, m...)
	}
	var sized []string
	for _, p := range files {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && (fi.Size() > 0 || f == DeleteIndex || f == DeleteSnapshot) {
			sized = append(sized, p)
		}
	}
	if len(sized) == 0 {
		return "", fmt.Errorf("%w: %s of %s under %s", ErrNoFile, f, stream, dataDir)
	}
	sort.Strings(sized)
	switch f {
	case FlipBit:
		path := sized[r.IntN(len(sized))]
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		off, bit := r.IntN(len(b)), r.IntN(8)
		b[off] ^= 1 << bit
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", err
		}
		return fmt.Sprintf("flipped bit %d of byte %d of %s (%d bytes)", bit, off, path, len(b)), nil
	case Truncate:
		path := sized[r.IntN(len(sized))]
		fi, err := os.Stat(path)
		if err != nil {
			return "", err
		}
		to := r.Int64N(fi.Size())
		if err := os.Truncate(path, to); err != nil {
			return "", err
		}
		return fmt.Sprintf("truncated %s from %d to %d bytes", path, fi.Size(), to), nil
	default:
		for _, p := range sized {
			if err := os.Remove(p); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("deleted %v", sized), nil
	}
}
