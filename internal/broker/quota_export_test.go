package broker

import "github.com/nats-io/nats.go"

// WithQuotaUser charges each message to the user f names, in place of
// the message's principal: the user quotas' tests, until store users
// publish from accounts the principal can name.
func WithQuotaUser(f func(nats.Header) string) Option {
	return func(s *Server) { s.quotaUser = f }
}

// QuotaOn reports whether the ingress checks quotas at all.
func QuotaOn(s *Server) bool { return s.ingress.quota.Load() != nil }

// TenantQueued is the tenant's prompt tokens waiting in the node's queues.
func TenantQueued(s *Server, tenant string) int64 {
	n, _ := s.tenantQueued(tenant)
	return n
}

// QuotaSizes is how many tenants and users the node keeps quota buckets for.
func QuotaSizes(s *Server) (tenants, users int) {
	q := s.ingress.quota.Load()
	if q == nil {
		return 0, 0
	}
	return q.lim.Sizes()
}
