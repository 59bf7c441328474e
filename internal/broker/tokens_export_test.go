package broker

import "context"

// TokenLimits are the limits of token streams a test may lower; zero keeps
// the default.
type TokenLimits struct {
	StoreBytes, StreamBytes, StreamRecords int64
	MaxStreams                             int
}

// SetTokenLimits lowers the node's token-stream limits, so a hostile test
// can reach them quickly.
func SetTokenLimits(ctx context.Context, s *Server, tl TokenLimits) error {
	l := defaultTokenLimits()
	if tl.StoreBytes > 0 {
		l.storeBytes = tl.StoreBytes
	}
	if tl.StreamBytes > 0 {
		l.streamBytes = tl.StreamBytes
	}
	if tl.StreamRecords > 0 {
		l.streamRecords = tl.StreamRecords
	}
	if tl.MaxStreams > 0 {
		l.maxStreams = tl.MaxStreams
	}
	return s.setTokenLimits(ctx, l)
}

// BindTokenJob does what the dispatcher does when it hands a job out: it
// makes the lease the only writer key of the job's token stream.
func BindTokenJob(s *Server, id, lease string) { s.tokens.bindJob(id, lease) }

// TokenRelayRefused is how many records the relay has refused.
func TokenRelayRefused(s *Server) uint64 { return s.tokens.stats.refused.Load() }

// TokenClaims is how many request ids the relay tracks.
func TokenClaims(s *Server) int {
	s.tokens.mu.Lock()
	defer s.tokens.mu.Unlock()
	return len(s.tokens.claims)
}
