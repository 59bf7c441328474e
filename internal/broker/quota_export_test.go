package broker

// QuotaOn reports whether the ingress checks quotas at all.
func QuotaOn(s *Server) bool { return s.ingress.Quota() != nil }

// TenantQueued is the tenant's prompt tokens waiting in the node's queues.
func TenantQueued(s *Server, tenant string) int64 {
	n, _ := s.streams.TenantQueued(tenant)
	return n
}

// QuotaSizes is how many tenants and users the node keeps quota buckets for.
func QuotaSizes(s *Server) (tenants, users int) {
	q := s.ingress.Quota()
	if q == nil {
		return 0, 0
	}
	return q.Sizes()
}
