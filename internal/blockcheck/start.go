package blockcheck

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"
)

// Mode is what a node does at start about a damaged record in its
// streams' message blocks (the config key store_check).
type Mode string

// The store check's modes. JetStream checks only a stream's last block at
// start and cuts a block at its first bad record; the records cut are not
// fetched again from the other replicas (the fault harness saw holes of
// tens of thousands of records on the damaged replica, after damage in the
// last block too), and a node that leads with them serves a history with
// a hole, with no error to clients (docs/faults.md, Defences).
const (
	// ModeOff reads nothing.
	ModeOff Mode = "off"
	// ModeReport logs each damaged record and starts anyway.
	ModeReport Mode = "report"
	// ModeRefuse logs each damaged record and does not start: the error
	// names the first, and what the operator can do.
	ModeRefuse Mode = "refuse"
	// ModeRepair moves each damaged replica aside (Quarantine: never
	// deleted), with its Raft groups' logs, so nats-server recreates it
	// empty and catches it up whole from the other replicas. Safe only
	// while they are intact, which the node cannot know: an operator's
	// choice. A replica with nothing to catch up from (a node outside a
	// cluster, an R1 stream) is refused as with ModeRefuse.
	ModeRepair Mode = "repair"
	// DefaultMode is refuse: a node that would serve holes costs more
	// than one that does not start, and reading the store costs little
	// at start (docs/faults.md#defences has the figures).
	DefaultMode = ModeRefuse
)

// ParseMode reads a mode by name, the default when empty; true and false,
// the key's meaning before it had modes, are report and off.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case ModeOff, ModeReport, ModeRefuse, ModeRepair:
		return m, nil
	case "true":
		return ModeReport, nil
	case "false":
		return ModeOff, nil
	case "":
		return DefaultMode, nil
	}
	return "", fmt.Errorf("store_check: %q is not a mode (want off, report, refuse or repair)", s)
}

// UnmarshalText reads a mode from a config file: a YAML boolean comes as
// its text, true or false.
func (m *Mode) UnmarshalText(b []byte) error {
	mode, err := ParseMode(string(b))
	if err == nil {
		*m = mode
	}
	return err
}

// ErrDamaged is what a node's start fails with when its store check
// found a damaged record it was not told (or not able) to repair.
var ErrDamaged = errors.New("store check: damaged record")

// Start is the store check of a node about to start, before JetStream
// opens its store.
type Start struct {
	DataDir   string
	Mode      Mode
	Clustered bool // the node is one of a cluster: other replicas may exist
	Log       *slog.Logger
}

// Outcome is what Run found and did.
type Outcome struct {
	Ran               bool // the mode was not off
	Damaged, Repaired int  // damaged records; replicas moved aside
}

// damaged is a replica found damaged, and its first damaged record.
type damaged struct {
	Replica
	first Damage
}

// Run reads every message block of every stream and logs each damaged
// record; then, by the mode, lets the node start, refuses (ErrDamaged),
// or moves the damaged replicas aside to be caught up from the others.
func (st Start) Run() (Outcome, error) {
	var out Outcome
	mode, err := ParseMode(string(st.Mode))
	if err != nil || mode == ModeOff {
		return out, err
	}
	out.Ran = true
	start := time.Now()
	replicas, err := Replicas(st.DataDir)
	if err != nil {
		return out, fmt.Errorf("store check: listing streams: %w", err)
	}
	blocks, records, read := 0, 0, int64(0)
	var bad []damaged
	for _, r := range replicas {
		rep, err := VerifyReplica(r)
		if err != nil {
			st.Log.Warn("store check: stream not checked", "stream", r.Stream, "account", r.Account, "err", err)
			continue
		}
		blocks, records, read = blocks+rep.Blocks, records+rep.Records, read+rep.Bytes
		for _, d := range rep.Damage {
			out.Damaged++
			st.Log.Error("store check: damaged record: JetStream cuts the block there and this replica loses the "+
				"records after it for good (the fault harness saw it write the stream's next records after the "+
				"hole, even when the damage was a cut-short tail of the last block, which is what a lost page cache "+
				"leaves), with no error to clients if it leads (docs/faults.md#defences)",
				"stream", r.Stream, "account", r.Account, "file", d.File, "offset", d.Offset, "damage", d.Reason,
				"last_block", d.File == rep.Last, "torn", d.Torn, "mode", mode)
		}
		if len(rep.Damage) > 0 {
			bad = append(bad, damaged{Replica: r, first: rep.Damage[0]})
		}
	}
	st.Log.Info("store check", "mode", mode, "streams", len(replicas), "blocks", blocks, "records", records,
		"bytes", read, "damaged", out.Damaged, "took", time.Since(start).Round(time.Millisecond))
	switch {
	case len(bad) == 0 || mode == ModeReport:
		return out, nil
	case mode == ModeRepair:
		if err := st.repairable(bad, out.Damaged); err != nil {
			return out, err
		}
		out.Repaired, err = st.repair(bad, start)
		return out, err
	case !st.Clustered:
		return out, refusal(bad, out.Damaged, notClustered)
	default:
		return out, refusal(bad, out.Damaged, "on a cluster whose other replicas of the stream are current "+
			"(semaq cluster status), start this node with store_check: repair to move the replica aside and catch "+
			"it up whole from them; to accept the loss (a single node, or no intact replica left), start it once "+
			"with store_check: report")
	}
}

// notClustered is the operator's choice on a node with no other replica.
const notClustered = "this node is not clustered, so no other replica can catch the stream up: restore it from a " +
	"backup, or start the node once with store_check: report to accept the loss"

// refusal is the error of a node that does not start: it names the first
// damaged record and the operator's choices (why).
func refusal(bad []damaged, records int, why string) error {
	d := bad[0]
	more := ""
	if records > 1 {
		more = fmt.Sprintf(" (%d damaged records in %d streams, each logged)", records, len(bad))
	}
	return fmt.Errorf("%w: stream %s (account %s), file %s at byte %d: %s%s; JetStream would cut the block there and "+
		"this replica would lose the records after it for good, so the node does not start: %s (docs/faults.md#defences)",
		ErrDamaged, d.Stream, d.Account, d.first.File, d.first.Offset, d.first.Reason, more, why)
}

// repairable refuses a repair that has nothing to catch up from: a node
// outside a cluster, or a stream of one replica. Nothing is moved unless
// every damaged replica can be.
func (st Start) repairable(bad []damaged, records int) error {
	if !st.Clustered {
		return refusal(bad, records, "store_check: repair needs the other replicas of a cluster: "+notClustered)
	}
	for _, d := range bad {
		n, err := d.NumReplicas()
		if err != nil {
			return refusal([]damaged{d}, 1, fmt.Sprintf("store_check: repair: the stream's replicas are not "+
				"known (%v): restore it from a backup, or start the node once with store_check: report", err))
		}
		if n < 2 {
			return refusal([]damaged{d}, 1, "store_check: repair: the stream has one replica, this one, so "+
				"there is nothing to catch it up from: restore it from a backup, or start the node once with "+
				"store_check: report to accept the loss")
		}
	}
	return nil
}

// repair moves each damaged replica, and its Raft groups' logs, to
// <data>/quarantine/<UTC time>/ (Quarantine says what moves and why), and
// returns how many it moved. The node has no audit log yet (it is a
// stream, opened after JetStream): the log line is the record.
func (st Start) repair(bad []damaged, at time.Time) (int, error) {
	dest := filepath.Join(st.DataDir, "quarantine", at.UTC().Format("20060102T150405.000Z"))
	for i, d := range bad {
		moved, err := Quarantine(st.DataDir, dest, d.Replica)
		if err != nil {
			return i, fmt.Errorf("store check: repair: moving stream %s (account %s) aside to %s (moved so far: %v): %w",
				d.Stream, d.Account, dest, moved, err)
		}
		if len(moved) == 1 {
			st.Log.Warn("store check: repair: no Raft group of the stream found (its log's meta.inf names none): "+
				"its log stays, so this node may be elected before it has caught up", "stream", d.Stream, "account", d.Account)
		}
		st.Log.Warn("store check: damaged replica moved aside (store_check: repair); nats-server recreates it "+
			"empty and catches it up from the other replicas, and its Raft groups start with no log, keeping "+
			"their term and vote; delete the quarantine once the stream is current on this node",
			"stream", d.Stream, "account", d.Account, "quarantine", dest, "moved", strings.Join(moved, ","))
	}
	return len(bad), nil
}
