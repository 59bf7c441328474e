package broker

import (
	"context"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/tokens"
)

// TokenLimits are the limits of token streams a test may lower; zero keeps
// the default.
type TokenLimits = tokens.Limits

// SetTokenLimits lowers the node's token-stream limits, so a hostile test
// can reach them quickly.
func SetTokenLimits(ctx context.Context, s *Server, tl TokenLimits) error {
	return s.tokens.SetLimits(ctx, tl)
}

// BindTokenJob does what the dispatcher does when it hands a job out: it
// makes the lease the only writer key of the job's token stream, stored
// under the job's tenant.
func BindTokenJob(s *Server, id, tenant, lease string) {
	s.tokens.BindJob(id, tenant, lease, api.AnswerChain{})
}

// TokenRelayRefused is how many records the relay has refused.
func TokenRelayRefused(s *Server) uint64 { return s.tokens.Stats().Refused }

// TokenClaims is how many request ids the relay tracks.
func TokenClaims(s *Server) int { return s.tokens.Stats().Claims }
