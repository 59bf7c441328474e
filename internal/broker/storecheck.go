package broker

import "github.com/semaq/semaq/internal/blockcheck"

// checkStore runs the store check (Config.StoreCheck: blockcheck.Start)
// before JetStream opens the store, and counts what it found and did. Its
// error stops the node's start.
func (s *Server) checkStore() error {
	out, err := blockcheck.Start{DataDir: s.cfg.DataDir, Mode: s.cfg.StoreCheck, Clustered: s.cfg.Clustered(), Log: s.log}.Run()
	if out.Ran {
		s.metrics.StoreChecked(out.Damaged, out.Repaired)
	}
	return err
}
