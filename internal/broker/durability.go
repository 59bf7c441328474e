package broker

import (
	"fmt"

	"github.com/semaq/semaq/internal/broker/streams"
)

// Durability modes of a stream (package streams).
const (
	DurabilityFsync    = streams.DurabilityFsync
	DurabilityInterval = streams.DurabilityInterval
	DurabilityMemory   = streams.DurabilityMemory
)

// In a cluster the durability of a stream is the nodes' --sync, not the
// stream's own choice. An fsync stream with replicas is only as durable as
// the Raft log of the nodes that acknowledge it, and JetStream fsyncs that
// log only with its server-wide sync_always: then the leader and each
// follower fsync an append (one per batch of proposals, so Raft group-commits
// by itself) before it counts towards the quorum, and the stream's block
// files are fsynced before the log is compacted. The ingress's committer
// cannot do the same from outside: it runs on the node the publisher reached,
// which may hold no replica or a lagging one, JetStream writes a replicated
// stream's block files asynchronously, and it compacts the log without an
// fsync unless sync_always is on. So a clustered node with --sync always runs
// JetStream with sync_always, and every file stream on it is fsynced per
// write (an R1 stream per message, an R3 stream per Raft append); a clustered
// node with --sync interval fsyncs none. A clustered node makes no committer
// at all: a stream whose recorded durability its mode does not give (one made
// before the node joined a cluster) is served at the node's mode, which its
// stream info reports. See docs/durability.md.

// jetstreamSyncs reports whether JetStream fsyncs every write itself.
func (s *Server) jetstreamSyncs() bool {
	return s.cfg.Clustered() && s.cfg.Sync == SyncAlways
}

// checkClusterDurability refuses, on a clustered node, a durability the
// node's JetStream does not give.
func (s *Server) checkClusterDurability(durability string) error {
	if !s.cfg.Clustered() || durability == "" {
		return nil
	}
	switch {
	case durability == DurabilityFsync && !s.jetstreamSyncs():
		return fmt.Errorf("durability fsync on a cluster needs every node started with --sync always (JetStream sync_always); node %s runs with --sync %s", s.cfg.Name, s.cfg.Sync)
	case durability == DurabilityInterval && s.jetstreamSyncs():
		return fmt.Errorf("durability interval is not available on node %s: it runs with --sync always, so JetStream fsyncs every write of every stream", s.cfg.Name)
	}
	return nil
}
