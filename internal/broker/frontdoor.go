package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/auth"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/telemetry"
)

// FrontDoor is what serves HTTP beside the broker: the REST and SSE API,
// the schema registry's REST API and the OpenAI-compatible gateway. The
// broker does not build it (it would have to import the SDK and every HTTP
// package): the composition root (internal/node) passes a FrontDoorFunc,
// and the broker starts it once ready and shuts it down first.
type FrontDoor interface {
	// Addr is the address it listens on.
	Addr() string
	// Shutdown stops taking requests, ends event streams and waits for
	// the requests in flight, bounded by ctx.
	Shutdown(ctx context.Context) error
}

// FrontDoorDeps is what the broker gives its front door.
type FrontDoorDeps struct {
	Config Config
	Log    *slog.Logger
	// Connect are the options of the front door's own NATS connection: in
	// process, as the front user (permissions.go).
	Connect []nats.Option
	// Ready reports whether the node can take traffic (/healthz).
	Ready func() error
	// Routes mounts the schema registry's REST API.
	Routes  func(*http.ServeMux)
	Metrics *metrics.Metrics
	Tracing *telemetry.Tracing
	// TLS, when not nil, is the configuration of the HTTPS listener; it
	// picks up ReloadTLS's certificates for each new connection.
	TLS *tls.Config
	// Identity, with auth on, authenticates the bearer keys of HTTP
	// requests (the identity store); nil with auth off, when the front
	// door serves everyone as the front user.
	Identity Identity
	// KeyConnect are the options of a connection that acts with an HTTP
	// caller's key (in process); the front door adds the key.
	KeyConnect []nats.Option
	// AuthLimiter slows down repeated failures from one IP; the NATS
	// door's, so both doors count the same failures. Nil with auth off.
	AuthLimiter *auth.Limiter
	// AuthFailed counts one refused request (semaq_auth_failures_total).
	AuthFailed func(reason string)
}

// Identity authenticates keys: *identity.Store.
type Identity interface {
	Authenticate(key string) (identity.Principal, error)
	// Changed is closed at the next change of the store.
	Changed() <-chan struct{}
}

// FrontDoorFunc starts a front door listening on deps.Config.HTTP, over TLS
// when deps.TLS is set.
type FrontDoorFunc func(ctx context.Context, deps FrontDoorDeps) (FrontDoor, error)

// WithFrontDoor makes the server start an HTTP front door with f when its
// configuration names an HTTP address. Without it, the server runs no HTTP.
func WithFrontDoor(f FrontDoorFunc) Option { return func(s *Server) { s.frontDoor = f } }

// openFrontDoor starts the HTTP front door (WithFrontDoor) when the
// configuration names an HTTP address. Closing it stops taking requests
// first of all.
func openFrontDoor(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	if s.frontDoor == nil || s.cfg.HTTP == "" {
		return nil, nil
	}
	deps := FrontDoorDeps{
		Config:  s.cfg,
		Log:     s.log,
		Connect: []nats.Option{nats.InProcessServer(s.ns), s.users.front.auth(), nats.Name("semaq-http")},
		Ready:   s.ready,
		Routes:  s.schemas.Routes,
		Metrics: s.metrics,
		Tracing: s.tracing,
		TLS:     s.tls.httpListener(),
	}
	if s.cfg.Auth {
		if s.identities == nil {
			return nil, errors.New("broker: http front door: auth is on but the identity store is not open")
		}
		deps.Identity = s.identities
		deps.KeyConnect = []nats.Option{nats.InProcessServer(s.ns), nats.Name("semaq-http-key")}
		deps.AuthLimiter = s.authn.Limiter()
		deps.AuthFailed = s.metrics.AuthFailure
	}
	fd, err := s.frontDoor(ctx, deps)
	if err != nil {
		return nil, err
	}
	s.front = fd
	return subsystem.Func(fd.Shutdown), nil
}
