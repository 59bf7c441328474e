package broker

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/semaq/semaq/internal/blockcheck"
)

// StoreCheckMode is what a node does at start about a damaged record in
// its streams' message blocks (Config.StoreCheck).
type StoreCheckMode string

// The store check's modes. JetStream checks only a stream's last block at
// start and cuts a block at its first bad record; the records cut are not
// fetched again from the other replicas (the fault harness saw holes of
// tens of thousands of records on the damaged replica, after damage in the
// last block too), and a node that leads with them serves a history with
// a hole, with no error to clients (docs/faults.md, Defences).
const (
	// StoreCheckOff reads nothing.
	StoreCheckOff StoreCheckMode = "off"
	// StoreCheckReport logs each damaged record and starts anyway.
	StoreCheckReport StoreCheckMode = "report"
	// StoreCheckRefuse logs each damaged record and does not start: the
	// error names the first, and what the operator can do.
	StoreCheckRefuse StoreCheckMode = "refuse"
	// StoreCheckRepair moves each damaged replica aside (never deletes
	// it), with its Raft groups' logs, so nats-server recreates it empty
	// and catches it up whole from the other replicas. Safe only while
	// they are intact, which the node cannot know: an operator's choice.
	// A replica with nothing to catch up from (a single node, an R1
	// stream) is refused as with StoreCheckRefuse.
	StoreCheckRepair StoreCheckMode = "repair"
	// StoreCheckDefault is refuse: a node that would serve holes costs
	// more than one that does not start, and reading the store costs
	// little at start (docs/faults.md#defences has the figures).
	StoreCheckDefault = StoreCheckRefuse
)

// ParseStoreCheckMode reads a mode by name; true and false, the key's
// meaning before it had modes, are report and off.
func ParseStoreCheckMode(s string) (StoreCheckMode, error) {
	switch m := StoreCheckMode(strings.ToLower(strings.TrimSpace(s))); m {
	case StoreCheckOff, StoreCheckReport, StoreCheckRefuse, StoreCheckRepair:
		return m, nil
	case "true":
		return StoreCheckReport, nil
	case "false":
		return StoreCheckOff, nil
	case "":
		return StoreCheckDefault, nil
	}
	return "", fmt.Errorf("store_check: %q is not a mode (want off, report, refuse or repair)", s)
}

// UnmarshalYAML takes a mode's name or a YAML boolean (true: report,
// false: off).
func (m *StoreCheckMode) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("store_check: line %d: want off, report, refuse or repair", n.Line)
	}
	v := n.Value
	if n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err != nil {
			return err
		}
		v = fmt.Sprint(b)
	}
	mode, err := ParseStoreCheckMode(v)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*m = mode
	return nil
}

// mode is m checked, the default when unset.
func (m StoreCheckMode) mode() (StoreCheckMode, error) { return ParseStoreCheckMode(string(m)) }

// ErrStoreDamaged is what a node's start fails with when its store check
// found a damaged record it was not told (or not able) to repair.
var ErrStoreDamaged = errors.New("store check: damaged record")

// damagedReplica is a replica the check found damaged, and its first
// damaged record.
type damagedReplica struct {
	blockcheck.Replica
	first blockcheck.Damage
}

// checkStore reads every message block of every stream before JetStream
// opens them (Config.StoreCheck) and logs each damaged record; then, by
// the mode, starts anyway, refuses to start, or moves the damaged replicas
// aside to be caught up from the other replicas.
func (s *Server) checkStore() error {
	mode, err := s.cfg.StoreCheck.mode()
	if err != nil || mode == StoreCheckOff {
		return err
	}
	start := time.Now()
	replicas, err := blockcheck.Replicas(s.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("store check: listing streams: %w", err)
	}
	blocks, records, read, bad := 0, 0, int64(0), 0
	var damaged []damagedReplica
	for _, r := range replicas {
		rep, err := blockcheck.VerifyReplica(r)
		if err != nil {
			s.log.Warn("store check: stream not checked", "stream", r.Stream, "account", r.Account, "err", err)
			continue
		}
		blocks, records, read = blocks+rep.Blocks, records+rep.Records, read+rep.Bytes
		for _, d := range rep.Damage {
			bad++
			s.log.Error("store check: damaged record: JetStream cuts the block there and this replica loses the "+
				"records after it for good (the fault harness saw it write the stream's next records after the "+
				"hole, even when the damage was a cut-short tail of the last block, which is what a lost page cache "+
				"leaves), with no error to clients if it leads (docs/faults.md#defences)",
				"stream", r.Stream, "account", r.Account, "file", d.File, "offset", d.Offset, "damage", d.Reason,
				"last_block", d.File == rep.Last, "torn", d.Torn, "mode", mode)
		}
		if len(rep.Damage) > 0 {
			damaged = append(damaged, damagedReplica{Replica: r, first: rep.Damage[0]})
		}
	}
	s.log.Info("store check", "mode", mode, "streams", len(replicas), "blocks", blocks, "records", records,
		"bytes", read, "damaged", bad, "took", time.Since(start).Round(time.Millisecond))
	repaired := 0
	defer func() { s.metrics.StoreChecked(bad, repaired) }()
	switch {
	case len(damaged) == 0 || mode == StoreCheckReport:
		return nil
	case mode == StoreCheckRepair:
		if err := s.repairable(damaged, bad); err != nil {
			return err
		}
		repaired, err = s.repairStore(damaged, start)
		return err
	case !s.cfg.Clustered():
		return refusal(damaged, bad, notClustered)
	default:
		return refusal(damaged, bad, "")
	}
}

// notClustered is the operator's choice on a node with no other replica.
const notClustered = "this node is not clustered, so no other replica can catch the stream up: restore it from a " +
	"backup, or start the node once with store_check: report to accept the loss"

// refusal is the error of a node that does not start on damaged: it names
// the first damaged record and the operator's choices.
func refusal(damaged []damagedReplica, records int, why string) error {
	d := damaged[0]
	more := ""
	if records > 1 {
		more = fmt.Sprintf(" (%d damaged records in %d streams, each logged)", records, len(damaged))
	}
	if why == "" {
		why = "on a cluster whose other replicas of the stream are current (semaq cluster status), start this node " +
			"with store_check: repair to move the replica aside and catch it up whole from them; to accept the loss " +
			"(a single node, or no intact replica left), start it once with store_check: report"
	}
	return fmt.Errorf("%w: stream %s (account %s), file %s at byte %d: %s%s; JetStream would cut the block there and "+
		"this replica would lose the records after it for good, so the node does not start: %s (docs/faults.md#defences)",
		ErrStoreDamaged, d.Stream, d.Account, d.first.File, d.first.Offset, d.first.Reason, more, why)
}

// repairable refuses a repair that has nothing to catch up from: a node
// outside a cluster, or a stream of one replica. Nothing is moved unless
// every damaged replica can be.
func (s *Server) repairable(damaged []damagedReplica, records int) error {
	if !s.cfg.Clustered() {
		return refusal(damaged, records, "store_check: repair needs the other replicas of a cluster: "+notClustered)
	}
	for _, d := range damaged {
		n, err := d.NumReplicas()
		if err != nil {
			return refusal([]damagedReplica{d}, 1, fmt.Sprintf("store_check: repair: the stream's replicas are not "+
				"known (%v): restore it from a backup, or start the node once with store_check: report", err))
		}
		if n < 2 {
			return refusal([]damagedReplica{d}, 1, "store_check: repair: the stream has one replica, this one, so "+
				"there is nothing to catch it up from: restore it from a backup, or start the node once with "+
				"store_check: report to accept the loss")
		}
	}
	return nil
}

// repairStore moves each damaged replica, and its Raft groups' logs, to
// <data>/quarantine/<UTC time>/ (blockcheck.Quarantine says what moves and
// why), and returns how many it moved. The node has no audit log yet (it
// is a stream, opened after JetStream): the log line is the record.
func (s *Server) repairStore(damaged []damagedReplica, at time.Time) (int, error) {
	dest := filepath.Join(s.cfg.DataDir, "quarantine", at.UTC().Format("20060102T150405.000Z"))
	for i, d := range damaged {
		moved, err := blockcheck.Quarantine(s.cfg.DataDir, dest, d.Replica)
		if err != nil {
			return i, fmt.Errorf("store check: repair: moving stream %s (account %s) aside to %s (moved so far: %v): %w",
				d.Stream, d.Account, dest, moved, err)
		}
		s.log.Warn("store check: damaged replica moved aside (store_check: repair); nats-server recreates it "+
			"empty and catches it up from the other replicas, and its Raft groups start with no log, keeping "+
			"their term and vote; delete the quarantine once the stream is current on this node",
			"stream", d.Stream, "account", d.Account, "quarantine", dest, "moved", strings.Join(moved, ","))
	}
	return len(damaged), nil
}
