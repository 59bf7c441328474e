package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/routes"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Wiring of the route rules (internal/broker/routes) into the node.

// startRoutes opens the route rules and hands them to the ingress. It runs
// before the ingress serves any stream, so no message is stored unrouted
// while the rules load.
func (s *Server) startRoutes(ctx context.Context) error {
	rt, err := routes.Open(ctx, routes.Deps{
		Log:      s.log.With("component", "routes"),
		JS:       s.js,
		Replicas: s.ownReplicas(),
		Conn:     s.nc,
		Expr:     s.cfg.exprConfig(),
		StreamFor: func(subject string) string {
			if st := s.ingress.streamFor(subject); st != nil {
				return st.name
			}
			return ""
		},
		StreamSubjects:   s.ingress.streamSubjects,
		StreamsCapturing: s.streamsCapturing,
		Check:            s.routeCheck,
		Audit:            s.audit,
		Applied: func(ctx context.Context, rev uint64) {
			s.clusterSync(ctx, syncRequest{Routes: rev})
		},
		Node:      s.ns.Name(),
		Clustered: s.cfg.Clustered(),
	})
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	s.routes = rt
	s.ingress.routes = rt
	return nil
}

// stopRoutes stops the rule watcher and the health interval; the ingress
// keeps the last table.
func (s *Server) stopRoutes(ctx context.Context) error {
	if s.routes == nil {
		return nil
	}
	return s.routes.Close(ctx)
}

// routeHandlers serves the route rules on $SQ.API.ROUTE.*.
func (s *Server) routeHandlers() api.Handlers {
	if s.routes == nil {
		return api.Handlers{}
	}
	return s.routes.Handlers()
}

// routeCheck runs the ingress's envelope and schema checks on the message
// of a route dry run: the refusal's description, "" when it passes.
func (s *Server) routeCheck(m *nats.Msg) string {
	env, err := semaq.Normalize(m.Header, time.Now(), s.ingress.opts)
	if err != nil {
		return err.Error()
	}
	if s.reg != nil {
		if e := checkSchema(s.reg, m, env.SchemaID); e != nil {
			return e.Description
		}
	}
	return ""
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
