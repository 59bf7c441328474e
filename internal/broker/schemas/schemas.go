// Package schemas is the schema registry's management doors: its NATS API
// on $SQ.API.SCHEMA.*, for the CLI and the SDK (api.go), and Confluent's
// REST API, mounted on the HTTP front door (rest.go). The registry itself,
// its storage, compatibility rules and the look-ups of schema-on-write,
// is internal/registry; this package only serves it.
//
// Every write, through either door, is recorded (docs/security.md, Audit)
// with what it changed before and after (audit.go: the readers the node
// registers), and in a cluster returns once every node this one reaches
// enforces it: the ingress of each node checks messages against the
// registry, so a write answered before the others apply it could be
// followed by a message they still let through.
package schemas

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/registry"
)

// Deps is what the registry's doors need from the node.
type Deps struct {
	// Registry is the schema registry they serve. Without one, every NATS
	// handler answers 503 (schema registry not running); Routes needs
	// one.
	Registry *registry.Registry
	// Log gets the answers that could not be sent. Nil logs nothing.
	Log *slog.Logger
	// Audit records each write asked through $SQ.API, by the principal of
	// the request (docs/security.md, Audit). Nil records nothing.
	Audit api.AuditFunc
	// AuditAs records a write of the REST API, asked by p through door
	// ("http"), as Audit does. Nil records nothing.
	AuditAs func(ctx context.Context, p api.Principal, door, op, target string) func(out *any, err *error)
	// Sync is called after a write of the NATS API succeeded, before it
	// is answered: in a cluster it returns once every node this one
	// reaches enforces the change, noting those that do not for the
	// answer (api.NoteLagging); bounded, it may block that long. Nil
	// returns at once.
	Sync func(ctx context.Context)
	// SyncHTTP wraps a write of the REST API so that it returns as its
	// NATS twin does: it holds the answer of a successful write until the
	// cluster enforces it. Nil wraps nothing.
	SyncHTTP func(http.Handler) http.Handler
}

// Service serves the registry on both doors. It starts no goroutine: its
// NATS handlers run on the subscriptions' goroutines and its REST
// handlers on the front door's. Its methods are safe for concurrent use.
type Service struct {
	log      *slog.Logger
	reg      *registry.Registry
	audit    api.AuditFunc
	auditAs  func(ctx context.Context, p api.Principal, door, op, target string) func(out *any, err *error)
	sync     func(ctx context.Context)
	syncHTTP func(http.Handler) http.Handler
}

// New makes the doors of deps.Registry; they are served by whoever
// subscribes Handlers and mounts Routes.
func New(deps Deps) *Service {
	s := &Service{log: deps.Log, reg: deps.Registry, audit: deps.Audit, auditAs: deps.AuditAs, sync: deps.Sync, syncHTTP: deps.SyncHTTP}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.audit == nil {
		s.audit = api.NoAudit
	}
	if s.auditAs == nil {
		s.auditAs = noAuditAs
	}
	if s.sync == nil {
		s.sync = func(context.Context) {}
	}
	if s.syncHTTP == nil {
		s.syncHTTP = func(h http.Handler) http.Handler { return h }
	}
	return s
}

// noAuditAs records nothing: the AuditAs of a Service given none.
func noAuditAs(context.Context, api.Principal, string, string, string) func(*any, *error) {
	return func(*any, *error) {}
}

// Close has nothing to stop: the node stops serving both doors before,
// and the registry is closed by its own part.
func (s *Service) Close(context.Context) error { return nil }
