package broker

import (
	"context"
	"time"

	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/internal/broker/subsystem"
)

// openQuotas gives the ingress the node's quotas (docs/quotas.md): the
// config file's, per tenant, and with auth on the users' own, read from
// the identity store's snapshot. With neither the ingress has no limiter
// and pays nothing for quotas. Called once the identity store is open;
// until then (the node is not ready) no quota applies.
func openQuotas(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	if s.cfg.Quotas.IsZero() && !s.cfg.Auth {
		return nil, nil
	}
	deps := quota.Deps{QueuedTokens: s.streams.TenantQueued, Now: s.quotaNow}
	if st := s.identities; st != nil {
		deps.UserLimits = func(user string) quota.Limits {
			u, err := st.Get(user)
			if err != nil {
				return quota.Limits{}
			}
			return quota.Limits{RPM: u.RPM, TPM: u.TPM}
		}
	}
	lim, err := quota.New(s.cfg.Quotas, deps)
	if err != nil {
		return nil, err
	}
	s.ingress.SetQuota(lim)
	return nil, nil
}

// WithQuotaClock makes the node's quotas read the time from now instead of
// the wall clock, so a test can step time past a Retry-After.
func WithQuotaClock(now func() time.Time) Option {
	return func(s *Server) { s.quotaNow = now }
}

// quotaServed charges the output tokens a worker reported for a request
// of tenant to the tenant's tokens per minute.
func (s *Server) quotaServed(tenant string, outputTokens int64) {
	if q := s.ingress.Quota(); q != nil {
		q.ChargeOutput(tenant, outputTokens)
	}
}
