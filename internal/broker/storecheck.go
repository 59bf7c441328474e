package broker

import (
	"path/filepath"
	"time"

	"github.com/semaq/semaq/internal/blockcheck"
)

// checkStore reads every message block of every stream before JetStream
// opens them (Config.StoreCheck) and logs what is damaged. JetStream
// checks only a stream's last block at start and cuts a block at its first
// bad record; a cut in a block that is not the last loses records in the
// middle of the stream that this replica never fetches again, so a node
// that became leader with it would serve a history with a hole
// (docs/faults.md#defences). The log says which stream, where, and what to
// do; the node still starts.
func (s *Server) checkStore() {
	start := time.Now()
	streams, err := blockcheck.Streams(s.cfg.DataDir)
	if err != nil {
		s.log.Warn("store check: listing streams", "err", err)
		return
	}
	blocks, records, damaged := 0, 0, 0
	for _, st := range streams {
		rep, err := blockcheck.Verify(s.cfg.DataDir, st)
		if err != nil {
			s.log.Warn("store check: stream not checked", "stream", st, "err", err)
			continue
		}
		blocks, records = blocks+rep.Blocks, records+rep.Records
		for _, d := range rep.Damage {
			damaged++
			if d.File == rep.Last {
				s.log.Warn("store check: damaged record in the stream's last block: JetStream cuts the block there; "+
					"on a cluster this replica catches the lost tail up from the leader, on a single node it is lost",
					"stream", st, "file", d.File, "offset", d.Offset, "damage", d.Reason)
				continue
			}
			s.log.Error("store check: damaged record in a block that is not the stream's last: JetStream cuts the "+
				"block there and this replica loses the records after it for good, with no error to clients if it "+
				"leads; stop this node, move the stream's directory aside (it is recreated and caught up from the "+
				"other replicas) and start it again, one node at a time (docs/faults.md#defences)",
				"stream", st, "file", d.File, "offset", d.Offset, "damage", d.Reason,
				"stream_dir", filepath.Dir(filepath.Dir(d.File)))
		}
	}
	s.log.Info("store check", "streams", len(streams), "blocks", blocks, "records", records, "damaged", damaged,
		"took", time.Since(start).Round(time.Millisecond))
}
