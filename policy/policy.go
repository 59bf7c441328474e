// Package policy is the seam where code of the node's operator acts on every
// message the ingress takes, before it is validated, routed and stored: PII
// redaction, content rules, provenance. A policy step sees who sent a
// message, the stream it is for, its subject, headers, payload and envelope,
// and answers with a verdict: pass it on unchanged, rewrite it, or refuse it
// with an error the publisher receives.
//
// Steps are registered by kind in a Registry (Default is the one `semaq
// serve` reads) and enabled by name in the node's configuration, in the order
// listed (docs/policy.md):
//
//	policy:
//	  - name: redact-cards
//	    settings: {mask: "[card]"}
//
// The ingress runs the enabled steps, in order, after the envelope (every
// AI-* header is read and the sender is known) and before schema-on-write:
// the schema bound to the subject validates the payload as the last step left
// it, so a step may neither store what the schema refuses nor be refused for
// what it fixed. The same steps run in dry runs (`semaq route test`), where
// DryRun reports true.
package policy

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// A Step is one policy step of the ingress. Apply is called once per message,
// on the ingress's goroutines: concurrently, so a Step is safe for concurrent
// use. It runs on the hot path of every publish, so it does no I/O it can
// avoid; ctx is the message's (its trace span, DryRun), not a deadline.
type Step interface {
	// Name names the step in trace spans ("policy <name>"), metrics and
	// refusals: the name it was enabled under.
	Name() string
	// Apply judges m. Pass leaves m as it came; Rewrite says the step
	// changed m.Data or m.Header (set a new slice or header map entries;
	// never write into m.Data's array, which belongs to the ingress's read
	// buffer). An error refuses the message: nothing is stored and the
	// publisher gets it as its reply (Refuse makes one; an error that is no
	// *semaq.APIError reaches the publisher as ErrPolicy naming the step).
	Apply(ctx context.Context, m *Message) (Verdict, error)
}

// An Idler is a Step that has nothing to do at times (the stored rules'
// step while no rule is stored): while Idle reports true the ingress skips
// it, with no span and no verdict counted. Idle is called once per message,
// concurrently, and must be cheap (an atomic load).
type Idler interface {
	Idle() bool
}

// Verdict is a step's answer on a message it does not refuse.
type Verdict uint8

const (
	// Pass: m is unchanged.
	Pass Verdict = iota
	// Rewrite: the step changed m's payload or headers. The ingress reads
	// the envelope again, and the payload is validated against its schema
	// after the last step.
	Rewrite
)

func (v Verdict) String() string {
	switch v {
	case Pass:
		return "pass"
	case Rewrite:
		return "rewrite"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Message is one message as a step sees it. Only Header and Data may be
// changed, and only with Rewrite.
type Message struct {
	// Principal is who sent the message, as the broker knows it.
	Principal Principal
	// Stream is the stream that captures Subject, before any route moves
	// the message.
	Stream string
	// Subject is the subject it was published on.
	Subject string
	// Header holds its headers, the envelope normalised and, for a store
	// user, AI-Tenant and AI-Publisher stamped by the broker: a step may
	// not change those two.
	Header nats.Header
	// Data is its payload, valid until Apply returns: copy it to keep it.
	Data []byte
	// Envelope is the AI-* envelope read from Header. Read-only: a step
	// changes the envelope by changing Header.
	Envelope semaq.Envelope
}

// Principal is the sender of a message.
type Principal struct {
	// Kind is KindAnonymous (auth off: every client is the same public
	// user), KindNode (the node's own clients) or KindUser.
	Kind string
	// User, Tenant and Role are a store user's (Kind == KindUser).
	User, Tenant, Role string
}

// The kinds of principal.
const (
	KindAnonymous = "anonymous"
	KindNode      = "node"
	KindUser      = "user"
)

// Refuse is the error a step refuses a message with: ErrPolicy, with the
// description the publisher reads. Say what was refused and what to do.
func Refuse(format string, args ...any) error {
	return semaq.NewAPIError(semaq.ErrPolicy, format, args...)
}

// AsAPIError is what the publisher receives for err, the refusal of the step
// named step of a message on subject: err itself when it is an
// *semaq.APIError, else ErrPolicy naming the step.
func AsAPIError(step, subject string, err error) *semaq.APIError {
	var e *semaq.APIError
	if errors.As(err, &e) {
		return e
	}
	return semaq.NewAPIError(semaq.ErrPolicy, "policy %s refused the message on %s: %v", step, subject, err)
}

type dryRunKey struct{}

// WithDryRun marks ctx as a dry run's: the message is judged, never stored.
func WithDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

// DryRun reports whether ctx is a dry run's (`semaq route test`): a step
// with effects beyond its verdict (a counter of its own, a call out) skips
// them.
func DryRun(ctx context.Context) bool {
	v, _ := ctx.Value(dryRunKey{}).(bool)
	return v
}
