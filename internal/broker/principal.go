package broker

import (
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
)

// principal is who sent a message with headers h (docs/security.md,
// Principals): with auth off, anonymous; with auth on, the store user the
// NATS server names in Nats-Request-Info, or the node itself when the
// message comes from a client of the node's own account (node users and
// operators: store users never are). Every $SQ.API handler and the
// ingress ask this, and only this.
func (s *Server) principal(h nats.Header) api.Principal {
	if !s.cfg.Auth {
		return api.Principal{Who: api.Anonymous}
	}
	ri, ok := api.ParseRequestInfo(h)
	if !ok || s.tenancy == nil || !s.tenancy.isUserAccount(ri.Account) {
		return api.Principal{Who: api.Node}
	}
	p := api.Principal{Who: api.User, User: ri.User, Tenant: s.tenancy.tenantOf(ri.Account)}
	if s.identities != nil {
		if u, err := s.identities.Get(ri.User); err == nil {
			p.Role = u.Role
		}
	}
	return p
}
