package broker

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/routes"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Wiring of the route rules (internal/broker/routes) into the node.

// routeCheck answers a route dry run ($SQ.API.ROUTE.TEST) with the
// ingress's own pipeline (ingress.Check), for the request's sender or, with
// as, for that store user: its tenant stamped and its policy applied as
// when it publishes. Only admins and the node reach the route API.
func (s *Server) routeCheck(ctx context.Context, m *nats.Msg, as string) (routes.Checked, *semaq.APIError, error) {
	who := s.principal(api.RequestHeader(ctx))
	if as != "" {
		if !s.cfg.Auth || s.identities == nil {
			return routes.Checked{}, nil, semaq.NewAPIError(semaq.ErrBadRequest, "route test: as %q: the node runs without --auth, so every publisher is the same public user", as)
		}
		u, err := s.identities.Get(as)
		if err != nil {
			return routes.Checked{}, nil, semaq.NewAPIError(semaq.ErrBadRequest, "route test: as %q: %v", as, err)
		}
		who = api.Principal{Who: api.User, User: u.Name, Tenant: u.Tenant, Role: u.Role}
	}
	d, err := s.ingress.Check(ctx, m, who)
	c := routes.Checked{Stream: d.Stream, Subject: d.Subject, Rule: d.Rule, Target: d.Target, RefusedBy: d.RefusedBy}
	if err != nil {
		var e *semaq.APIError
		if !errors.As(err, &e) {
			e = semaq.NewAPIError(semaq.ErrUnavailable, "%v", err)
		}
		return c, e, nil
	}
	return c, nil, nil
}

// streamsCapturing names the SemaQ streams that capture a public subject,
// as $SQ.API.STREAM.LOOKUP finds them.
func (s *Server) streamsCapturing(ctx context.Context, subject string) ([]string, error) {
	var names []string
	lister := s.js.StreamNames(ctx, jetstream.WithStreamListSubject(reserved.StoragePrefix+subject))
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		return nil, api.JSError(err, "looking up the stream of %s", subject)
	}
	return names, nil
}
