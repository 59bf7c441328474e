package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/reserved"
)

// A node is this list. Start opens each subsystem in order, giving it
// what the ones before it made; Shutdown closes them in the reverse
// order, so nothing closes under a part that still uses it. Adding a
// subsystem is a package (with its Deps, Handlers and Close) and one line
// here; docs/architecture.md walks through one.
var subsystems = []part{
	{"data-lock", openDataLock},
	{"observability", openObservability},
	{"nats", openNATS},
	{"connections", openConnections},
	{"cluster-sync", openClusterSync}, // asking; answering waits for cluster-sync-answers
	{"schema-registry", openRegistry},
	{"memory", openMemory},
	{"audit", openAudit},
	{"routes", openRoutes},
	{"policies", openPolicies},
	{"provenance", openProvenance},
	{"classes", openClasses},
	{"ingress", openIngress},
	{"dlq", openDLQ},
	{"tokens", openTokens},
	{"streams", openStreams},
	{"agents", openAgents},
	{"sessions", openSessions},
	{"models", openModels},
	{"filters", openFilters},
	{"keyshared", openKeyShared},
	{"users", openUsers},
	{"quotas", openQuotas},
	{"jetstream-guard", openJetStreamGuard},
	{"schemas", openSchemaAPI},
	{"cluster-sync-answers", openClusterSyncAnswers},
	{"cluster", openClusterStatus},
	{"embedded", openEmbedded}, // WithSubsystem's, in the order given
	{"api", openAPI},
	{"http", openFrontDoor},
	{"replicas", openReplicaKeeper},
}

// part is one line of the list: open makes the subsystem from the node as
// far as it is open. A part that serves API handlers returns a
// subsystem.API.
type part struct {
	name string
	open func(ctx context.Context, s *Server) (subsystem.Subsystem, error)
}

// opened is a subsystem the node opened, for Shutdown.
type opened struct {
	name string
	sub  subsystem.Subsystem
}

// openAll opens the list; on an error, what opened is closed again.
func (s *Server) openAll(ctx context.Context) error {
	for _, p := range subsystems {
		sub, err := p.open(ctx, s)
		if err != nil {
			return err
		}
		if sub != nil {
			s.opened = append(s.opened, opened{p.name, sub})
		}
	}
	return nil
}

// closeAll closes what opened, in reverse; the node's goroutine gate
// last, once every subsystem has waited for its own.
func (s *Server) closeAll(ctx context.Context) error {
	var errs []error
	for i := len(s.opened) - 1; i >= 0; i-- {
		o := s.opened[i]
		if err := o.sub.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", o.name, err))
		}
	}
	s.opened = nil
	if err := s.gate.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("goroutines: %w (%d still running)", err, s.gate.Running()))
	}
	return errors.Join(errs...)
}

// core is what every subsystem made outside this package may use of the
// node (WithSubsystem).
func (s *Server) core(name string) subsystem.Core {
	return subsystem.Core{
		Log:       s.log.With("component", name),
		JS:        s.js,
		Conn:      s.nc,
		Egress:    s.egress,
		Node:      s.ns.Name(),
		Clustered: s.cfg.Clustered(),
		Replicas:  s.ownReplicas,
		Gate:      s.gate.Child(name),
		Audit:     s.audit,
		Metrics:   s.metrics,
	}
}

// WithSubsystem adds a subsystem to the node, opened after the built-in
// ones (before the API is served: its handlers are) and closed before
// them. Its resources join the node's own (internal/reserved): protected
// from clients, and replicated with the cluster when they say so.
func WithSubsystem(spec subsystem.Spec) Option {
	return func(s *Server) { s.embedded = append(s.embedded, spec) }
}

func openEmbedded(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	var subs []opened
	for _, spec := range s.embedded {
		core := s.core(spec.Name)
		sub, err := spec.Open(ctx, core)
		if err == nil && sub == nil {
			err = errors.New("opened nothing")
		}
		if err != nil {
			_ = core.Gate.Close(ctx)
			_ = closeOpened(ctx, subs)
			return nil, fmt.Errorf("broker: %s: %w", spec.Name, err)
		}
		subs = append(subs, opened{spec.Name, gated{sub, core.Gate}})
	}
	return embeddedParts(subs), nil
}

// gated is a subsystem whose gate closes after it: what it started and
// did not wait for is waited for there.
type gated struct {
	subsystem.Subsystem
	gate *subsystem.Gate
}

func (g gated) Close(ctx context.Context) error {
	return errors.Join(g.Subsystem.Close(ctx), g.gate.Close(ctx))
}

func (g gated) Handlers() api.Handlers {
	if a, ok := g.Subsystem.(subsystem.API); ok {
		return a.Handlers()
	}
	return nil
}

// embeddedParts are WithSubsystem's subsystems, opened and closed as one.
type embeddedParts []opened

func (e embeddedParts) Close(ctx context.Context) error { return closeOpened(ctx, e) }

func (e embeddedParts) Handlers() api.Handlers {
	h := api.Handlers{}
	for _, o := range e {
		if a, ok := o.sub.(subsystem.API); ok {
			h.Merge(a.Handlers())
		}
	}
	return h
}

func closeOpened(ctx context.Context, subs []opened) error {
	var errs []error
	for i := len(subs) - 1; i >= 0; i-- {
		if err := subs[i].sub.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", subs[i].name, err))
		}
	}
	return errors.Join(errs...)
}

// openAPI serves the management API: every open subsystem's handlers, on
// the egress connection. Whatever reply subject a client names, the
// broker cannot be made to publish into its own namespaces with it.
// Closing it stops taking requests first, before the subsystems close.
func openAPI(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	handlers := api.Handlers{}
	for _, o := range s.opened {
		if a, ok := o.sub.(subsystem.API); ok {
			handlers.Merge(a.Handlers())
		}
	}
	var subs []*nats.Subscription
	unsubscribe := subsystem.Func(func(context.Context) error {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		return nil
	})
	for subj, h := range handlers {
		sub, err := s.egress.QueueSubscribe(subj, reserved.APIQueueGroup, api.CheckedReply(s.log, h))
		if err != nil {
			_ = unsubscribe.Close(context.Background())
			return nil, fmt.Errorf("broker: api: %w", err)
		}
		subs = append(subs, sub)
	}
	if err := s.egress.Flush(); err != nil {
		_ = unsubscribe.Close(context.Background())
		return nil, fmt.Errorf("broker: api: %w", err)
	}
	return unsubscribe, nil
}

// openDataLock refuses a second node on the data directory before
// anything is opened: each would rebuild JetStream's state under the
// other. It is released last, once the NATS server has closed its files.
func openDataLock(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	lock, err := lockDataDir(s.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	return subsystem.Func(func(context.Context) error { return lock.release() }), nil
}

// closeConn drains nc within ctx, or closes it.
func closeConn(ctx context.Context, nc *nats.Conn) error {
	if nc == nil || nc.IsClosed() {
		return nil
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return nil
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		nc.Close()
		return fmt.Errorf("draining: %w", ctx.Err())
	}
}
