package blockcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Replica is one account's copy of a stream in a node's store:
// <data>/jetstream/<account>/streams/<stream>.
type Replica struct {
	Account, Stream string
	Dir             string
}

// Replicas are the stream replicas of every account in the store under
// dataDir, by account then stream. A directory whose name starts with a
// dot is a stream nats-server was deleting, which it removes at start:
// not a replica.
func Replicas(dataDir string) ([]Replica, error) {
	dirs, err := filepath.Glob(filepath.Join(dataDir, "jetstream", "*", "streams", "*"))
	if err != nil {
		return nil, err
	}
	out := make([]Replica, 0, len(dirs))
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() || strings.HasPrefix(fi.Name(), ".") {
			continue
		}
		out = append(out, Replica{Account: filepath.Base(filepath.Dir(filepath.Dir(d))), Stream: filepath.Base(d), Dir: d})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Account != out[j].Account {
			return out[i].Account < out[j].Account
		}
		return out[i].Stream < out[j].Stream
	})
	return out, nil
}

// NumReplicas is the stream's replication factor as its meta.inf (the
// stream's configuration, written by nats-server) records it.
func (r Replica) NumReplicas() (int, error) {
	b, err := os.ReadFile(filepath.Join(r.Dir, "meta.inf"))
	if err != nil {
		return 0, err
	}
	var cfg struct {
		Replicas int `json:"num_replicas"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return 0, fmt.Errorf("blockcheck: %s: %w", filepath.Join(r.Dir, "meta.inf"), err)
	}
	return max(cfg.Replicas, 1), nil
}

// RaftGroup is the directory of a clustered stream's or consumer's Raft
// group: <data>/jetstream/$SYS/_js_/<group>, holding tav.idx (term and
// vote), peers.idx, the log (msgs/, a file store of its own) and
// snapshots/.
type RaftGroup struct {
	Dir      string
	Type     string // "stream" or "consumer"
	Consumer string // for a consumer's group
}

// RaftGroups are the Raft groups of r's stream and of its consumers.
// nats-server names a group at random (S-R3F-…, C-R3F-…) and keeps the
// stream it belongs to in the meta layer's assignments; the group's log
// is a file store whose meta.inf records, as its metadata, the type,
// account and stream (and consumer) it was made for (createRaftGroup's
// labels), which is what is read here.
func RaftGroups(dataDir string, r Replica) ([]RaftGroup, error) {
	metas, err := filepath.Glob(filepath.Join(dataDir, "jetstream", "$SYS", "_js_", "*", "meta.inf"))
	if err != nil {
		return nil, err
	}
	var out []RaftGroup
	for _, m := range metas {
		b, err := os.ReadFile(m)
		if err != nil {
			return nil, err
		}
		var cfg struct {
			Metadata map[string]string `json:"metadata"`
		}
		if json.Unmarshal(b, &cfg) != nil {
			continue // encrypted, or not a group's log
		}
		md := cfg.Metadata
		if md["account"] != r.Account || md["stream"] != r.Stream || (md["type"] != "stream" && md["type"] != "consumer") {
			continue
		}
		out = append(out, RaftGroup{Dir: filepath.Dir(m), Type: md["type"], Consumer: md["consumer"]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Dir < out[j].Dir })
	return out, nil
}

// Quarantine moves r aside under dest (a directory in the same file
// system, made if missing), keeping each path's place relative to dataDir,
// so the node starts without the replica and nats-server recreates it
// empty and catches it up from the other replicas. From every Raft group
// of the stream and its consumers it moves the log (msgs/) and snapshots/,
// so the group restarts at index 0 and cannot win an election before it
// has caught up (a candidate needs a log as long as a majority's), and
// keeps tav.idx (its term and vote: it cannot vote twice in a term) and
// peers.idx. The groups are moved first: if the node dies half-way, the
// damaged replica is still there for the next start's check to find.
// It returns what it moved, as paths under dataDir. Nothing is deleted.
func Quarantine(dataDir, dest string, r Replica) ([]string, error) {
	groups, err := RaftGroups(dataDir, r)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, g := range groups {
		for _, sub := range []string{"msgs", "snapshots"} {
			if _, err := os.Stat(filepath.Join(g.Dir, sub)); err == nil {
				paths = append(paths, filepath.Join(g.Dir, sub))
			}
		}
	}
	paths = append(paths, r.Dir)
	var moved []string
	for _, p := range paths {
		rel, err := filepath.Rel(dataDir, p)
		if err != nil {
			return moved, err
		}
		to := filepath.Join(dest, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
			return moved, err
		}
		if _, err := os.Stat(to); err == nil {
			return moved, fmt.Errorf("blockcheck: quarantine: %s exists", to)
		} else if !errors.Is(err, os.ErrNotExist) {
			return moved, err
		}
		if err := os.Rename(p, to); err != nil {
			return moved, fmt.Errorf("blockcheck: quarantine: %w", err)
		}
		moved = append(moved, rel)
		// The move lasts past a crash before nats-server starts.
		syncDir(filepath.Dir(p))
		syncDir(filepath.Dir(to))
	}
	return moved, nil
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		_ = f.Close()
	}
}
