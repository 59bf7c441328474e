package pump

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// Deps is what every subsystem built on pumps needs from the node; the
// subsystem's own Deps embeds it and adds the rest.
type Deps struct {
	JS     jetstream.JetStream // consumers, on the internal connection
	Egress *nats.Conn          // forwards to the clients' subjects
	Log    *slog.Logger        // nil discards
	Env    *expr.Env           // compiles the clients' expressions
	// Streams names the streams that capture a public subject.
	Streams func(ctx context.Context, subject string) ([]string, error)
	// Authorize says whether the sender of the request ctx serves may
	// read subject and be delivered to deliver (the node checks the
	// principal's grants: docs/security.md); nil allows everyone.
	Authorize func(ctx context.Context, subject, deliver string) error
	// Max bounds what this node runs for clients (subscriptions,
	// members); 0 is the subsystem's default.
	Max int
	// Node is this node's name (the NATS server's), as JetStream names
	// the leaders of consumers.
	Node string
	// Gate runs the subsystem's goroutines (its reap loop, a key-shared
	// group's interval); the subsystem's Close closes it. Nil makes one of
	// its own.
	Gate *subsystem.Gate
}

// Prepare checks that d has what a subsystem cannot run without, and
// returns it with a discarding logger when it has none and def when it
// sets no Max.
func (d Deps) Prepare(def int) (Deps, error) {
	if d.JS == nil || d.Egress == nil || d.Env == nil || d.Streams == nil {
		return d, errors.New("JS, Egress, Env and Streams are required")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Gate == nil {
		d.Gate = subsystem.NewGate("pump")
	}
	if d.Authorize == nil {
		d.Authorize = func(context.Context, string, string) error { return nil }
	}
	if d.Max <= 0 {
		d.Max = def
	}
	return d, nil
}

// Locate refuses a start when the node already runs d.Max (running now),
// then finds the stream that captures s.Subject and, when s names a
// durable, the durable as Resume does: nil and s.Expr when there is none
// yet, else the consumer and its stored expression.
func (d Deps) Locate(ctx context.Context, running int, s Spec, w Words) (stream string, cons jetstream.Consumer, expr string, err error) {
	if running >= d.Max {
		return "", nil, "", semaq.NewAPIError(semaq.ErrOverloaded, w.Overloaded, running)
	}
	if stream, err = d.StreamFor(ctx, s.Subject, w.Bad); err != nil {
		return "", nil, "", err
	}
	if s.Durable == "" {
		return stream, nil, s.Expr, nil
	}
	cons, expr, err = Resume(ctx, d.JS, stream, s, w)
	return stream, cons, expr, err
}

// StreamFor finds the one stream that captures subject.
func (d Deps) StreamFor(ctx context.Context, subject string, bad BadFunc) (string, error) {
	names, err := d.Streams(ctx, subject)
	if err != nil {
		return "", err
	}
	switch len(names) {
	case 0:
		return "", semaq.NewAPIError(semaq.ErrNoStream, "no stream captures subject %s", subject)
	case 1:
		return names[0], nil
	default:
		return "", bad("subject %s spans streams %v; use a narrower subject", subject, names)
	}
}
