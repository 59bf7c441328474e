package broker

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"

	"github.com/nats-io/nats.go"

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
}

// FrontDoorFunc starts a front door listening on deps.Config.HTTP, over TLS
// when deps.TLS is set.
type FrontDoorFunc func(ctx context.Context, deps FrontDoorDeps) (FrontDoor, error)

// WithFrontDoor makes the server start an HTTP front door with f when its
// configuration names an HTTP address. Without it, the server runs no HTTP.
func WithFrontDoor(f FrontDoorFunc) Option { return func(s *Server) { s.frontDoor = f } }

func (s *Server) startFrontDoor(ctx context.Context) error {
	if s.frontDoor == nil || s.cfg.HTTP == "" {
		return nil
	}
	fd, err := s.frontDoor(ctx, FrontDoorDeps{
		Config:  s.cfg,
		Log:     s.log,
		Connect: []nats.Option{nats.InProcessServer(s.ns), s.users.front.auth(), nats.Name("semaq-http")},
		Ready:   s.ready,
		Routes:  s.reg.Routes,
		Metrics: s.metrics,
		Tracing: s.tracing,
		TLS:     s.tls.httpListener(),
	})
	if err != nil {
		return err
	}
	s.front = fd
	return nil
}
