package broker

import (
	"os"

	"github.com/semaq/semaq/internal/registry"

	"github.com/semaq/semaq/semaq"
)

// SetSyncHook replaces fsync in group commits; call before Start.
func SetSyncHook(s *Server, f func(*os.File) error) { s.syncFile = f }

// StoreDir exposes where a stream's block files are.
func StoreDir(s *Server, stream string) string { return s.account().streamDir(stream) }

// AcksRouted is how many JetStream acks the group-commit router has seen.
func AcksRouted(s *Server) uint64 { return s.ingress.AcksRouted() }

// CommitStats returns a stream's group-commit figures.
func CommitStats(s *Server, stream string) *semaq.CommitStats { return s.ingress.CommitStats(stream) }

// Registry exposes the node's schema registry.
func Registry(s *Server) *registry.Registry { return s.reg }
