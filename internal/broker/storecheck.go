package broker

import (
	"path/filepath"
	"time"

	"github.com/semaq/semaq/internal/blockcheck"
)

// checkStore reads every message block of every stream before JetStream
// opens them (Config.StoreCheck) and logs what is damaged. JetStream
// checks only a stream's last block at start and cuts a block at its first
// bad record; the records cut are not fetched again from the other
// replicas (the fault harness saw holes of tens of thousands of records on
// the damaged replica, in the last block too), so a node that became
// leader with it would serve a history with a hole (docs/faults.md,
// Defences). The log says which stream, where, and what to do; the node
// still starts.
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
			attrs := []any{"stream", st, "file", d.File, "offset", d.Offset, "damage", d.Reason,
				"last_block", d.File == rep.Last, "torn", d.Torn, "stream_dir", filepath.Dir(filepath.Dir(d.File))}
			s.log.Error("store check: damaged record: JetStream cuts the block there and this replica loses the "+
				"records after it for good (the fault harness saw it write the stream's next records after the "+
				"hole, even when the damage was a cut-short tail of the last block, which is what a lost page cache "+
				"leaves), with no error to clients if it leads; stop this node, move the stream's directory aside (it "+
				"is recreated and caught up from the other replicas) and start it again, one node at a time "+
				"(docs/faults.md#defences)", attrs...)
		}
	}
	s.log.Info("store check", "streams", len(streams), "blocks", blocks, "records", records, "damaged", damaged,
		"took", time.Since(start).Round(time.Millisecond))
}
