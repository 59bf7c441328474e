package broker

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/dispatch"
	"github.com/semaq/semaq/internal/broker/tokens"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/semaq"
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

// tokenSender is who sent a token record or status request with headers
// h (tokens.Deps.Sender; docs/security.md, Tenant isolation).
func (s *Server) tokenSender(h nats.Header) tokens.Sender {
	p := s.principal(h)
	tenant, anyTenant := p.TokenTenant()
	return tokens.Sender{Tenant: tenant, AnyTenant: anyTenant, Worker: p.Who == api.User && p.Role == semaq.RoleWorker}
}

// authorizeRead says whether the sender of the request ctx serves may run
// a filtered subscription or key-shared member on subject, delivered to
// deliver: the broker reads the stream with its own rights, so it checks
// the user's, as the NATS server would for a consumer of the user's own
// (docs/security.md, Roles). Readers and services read the subjects they
// are granted, into their own inbox; admins and the node read anything.
// With auth off, everyone reads anything, into an inbox.
func (s *Server) authorizeRead(ctx context.Context, subject, deliver string) error {
	if !s.cfg.Auth {
		// The public account receives the node's deliveries on its
		// inboxes only (tenancy.go): elsewhere they would reach no one.
		if inbox := strings.TrimSuffix(publicInbox, ">"); !strings.HasPrefix(deliver, inbox) {
			return semaq.NewAPIError(semaq.ErrBadRequest, "deliver_subject %s is not an inbox: clients without credentials receive deliveries under %s only", deliver, inbox)
		}
		return nil
	}
	p := s.principal(api.RequestHeader(ctx))
	if p.Who != api.User || p.Role == semaq.RoleAdmin {
		return nil
	}
	if p.Role != semaq.RoleReader && p.Role != semaq.RoleService {
		return semaq.NewAPIError(semaq.ErrForbidden, "user %s (role %s) may not read streams; readers and services may", p.User, p.Role)
	}
	u, err := s.identities.Get(p.User)
	if err != nil {
		return semaq.NewAPIError(semaq.ErrForbidden, "user %s is not known any more", p.User)
	}
	granted := false
	for _, g := range u.Subjects {
		if server.SubjectMatchesFilter(subject, g) {
			granted = true
			break
		}
	}
	if !granted {
		return semaq.NewAPIError(semaq.ErrForbidden, "user %s may not read %s: its subjects are %s", p.User, subject, strings.Join(u.Subjects, ", "))
	}
	if inbox := semaq.UserInboxPrefix + p.User + "."; !strings.HasPrefix(deliver, inbox) {
		return semaq.NewAPIError(semaq.ErrForbidden, "user %s: deliver subject %s is not in its inbox %s>", p.User, deliver, inbox)
	}
	return nil
}

// authorizePublish says whether who may publish on subject, as its NATS
// permissions would let it (auth/roles.go): the messages of a batch frame
// are appended by the broker with its own rights (docs/batches.md).
// Publishers and services publish on the subjects they are granted;
// admins and the node on any; with auth off, everyone.
func (s *Server) authorizePublish(who api.Principal, subject string) *semaq.APIError {
	if who.Who != api.User || who.Role == semaq.RoleAdmin {
		return nil
	}
	if who.Role != semaq.RolePublisher && who.Role != semaq.RoleService {
		return semaq.NewAPIError(semaq.ErrForbidden, "publish on %s: user %s (role %s) may not publish; publishers and services may", subject, who.User, who.Role)
	}
	u, err := s.identities.Get(who.User)
	if err != nil {
		return semaq.NewAPIError(semaq.ErrForbidden, "publish on %s: user %s is not known any more", subject, who.User)
	}
	for _, g := range u.Subjects {
		if server.SubjectMatchesFilter(subject, g) {
			return nil
		}
	}
	return semaq.NewAPIError(semaq.ErrForbidden, "publish on %s: user %s may not publish there: its subjects are %s", subject, who.User, strings.Join(u.Subjects, ", "))
}

// authorizeQueue says whether the sender of a fetch (headers h) may serve
// queue: a worker whose queue globs match it, an admin, or the node. The
// NATS permissions let a worker ask any queue (auth/roles.go), since a
// glob is a wildcard inside a subject token.
func (s *Server) authorizeQueue(h nats.Header, queue string) *semaq.APIError {
	p := s.principal(h)
	if p.Who != api.User || p.Role == semaq.RoleAdmin {
		return nil
	}
	if p.Role != semaq.RoleWorker {
		return semaq.NewAPIError(semaq.ErrForbidden, "queue %s: user %s (role %s) does not serve queues; workers do", queue, p.User, p.Role)
	}
	u, err := s.identities.Get(p.User)
	if err != nil {
		return semaq.NewAPIError(semaq.ErrForbidden, "queue %s: user %s is not known any more", queue, p.User)
	}
	if !identity.QueueMatches(u.Queues, queue) {
		return semaq.NewAPIError(semaq.ErrForbidden, "queue %s: user %s may not serve it: its queues are %s", queue, p.User, strings.Join(u.Queues, ", "))
	}
	return nil
}

// cancelRights is whom the sender of a cancel (headers h) may cancel
// without the request's token (dispatch.CancelRights): with auth on, an
// admin and the node anyone's, a service its tenant's, a user its own;
// with auth off nobody: every client is the same public user, and the
// token is what tells the publisher apart.
func (s *Server) cancelRights(h nats.Header) dispatch.CancelRights {
	if !s.cfg.Auth {
		return dispatch.CancelRights{}
	}
	p := s.principal(h)
	if p.Who != api.User || p.Role == semaq.RoleAdmin {
		return dispatch.CancelRights{Any: true}
	}
	return dispatch.CancelRights{User: p.User, Service: p.Role == semaq.RoleService, Tenant: p.Tenant,
		Who: fmt.Sprintf("user %s (role %s)", p.User, p.Role)}
}
