package broker

import "log/slog"

// CheckStore runs the store check of a node with cfg, as its start would,
// without starting it.
func CheckStore(cfg Config, log *slog.Logger) error {
	s := &Server{cfg: cfg, log: log}
	return s.checkStore()
}
