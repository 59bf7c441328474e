package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/semaq"
)

// Deps is everything a dispatcher uses besides its queue's configuration:
// the node wires it (internal/broker, wiring.go: dispatchDeps). Funcs may be called from
// any of the dispatcher's goroutines, concurrently; those documented as
// called with the dispatcher's lock held must take only leaf locks of
// their own and never call back into the dispatcher.
type Deps struct {
	// Internal connects as the node's internal user, with the rights for
	// JetStream (the queue's stream and consumer, direct gets, acks) and
	// $SQ (the queue's fetch, cancel and answer subjects, cancel notices).
	// opts (the connection's name and handlers) come after the node's own.
	// Required.
	Internal func(opts ...nats.Option) (*nats.Conn, error)
	// Egress connects as the egress user, the one every message to a
	// subject a client chose leaves by (fetch replies, job frames, answer
	// and cancel replies). It must not be able to reach JetStream or $SQ:
	// the second line behind semaq.CheckReplySubject. Required.
	Egress func(opts ...nats.Option) (*nats.Conn, error)
	// Interest reports whether anyone listens on subject (a parked
	// fetch's reply, h its request's headers): work is not leased to a
	// worker that is gone. Called with the dispatcher's lock held. Nil:
	// always true.
	Interest func(subject string, h nats.Header) bool
	// CancelRights is who the sender of a cancel (its headers h) may
	// cancel without the request's token. Called without the lock. Nil:
	// nobody (every cancel needs the token).
	CancelRights func(h nats.Header) CancelRights
	// Authorize says whether the sender of a fetch (its headers h) may
	// serve queue: the node checks a worker's queue grants. Called
	// without the lock. Nil: everyone may.
	Authorize func(h nats.Header, queue string) *semaq.APIError
	// Match reports whether a literal subject matches a subject pattern
	// (the subject filter of a fetch). Required.
	Match func(pattern, subject string) bool
	// StoreDeadLetter stores a request that leaves the queue for the
	// dead-letter queue: dl describes it, hdr and data are the stored
	// request read back from the stream. The request leaves the stream only
	// when it returns nil; it must be idempotent for the same
	// dl.Stream, dl.StreamSeq and dl.Consumer. Called without the lock.
	// Required.
	StoreDeadLetter func(ctx context.Context, dl *semaq.DeadLetter, hdr nats.Header, data []byte) error
	// BindJob makes the holder of lease the only writer of the token
	// stream of request id of tenant (the job's AI-Tenant), ending the
	// previous holder's right; ch, when on, is where the stream's answer
	// is chained. Called with the dispatcher's lock held. Nil: no token
	// streams.
	BindJob func(id, tenant, lease string, ch api.AnswerChain)
	// EndJob ends the token stream of a cancelled request id of tenant
	// with te, unless it has ended. Called without the lock. Nil: no
	// token streams.
	EndJob func(id, tenant string, te *semaq.TokenError)
	// Served is told the output tokens a worker reported when it acked a
	// request of tenant, for the tenants' token quotas. Called with the
	// dispatcher's lock held. Nil: nobody is told.
	Served func(tenant string, outputTokens int64)
	// Classes are the hardware classes and their slots (classes.go). Nil:
	// no classes; requests are placed by their own labels only.
	Classes Classes
	// Observer is told what happens to requests, for metrics. Nil:
	// nothing is recorded.
	Observer Observer
	// Tracer starts the dispatch span of a request that carries a trace
	// context (from its arrival to its dispatch). Nil: no spans.
	Tracer trace.Tracer
	// Resync asks the node to check which queues it should dispatch: the
	// dispatcher calls it when it finds that its node no longer leads the
	// queue's stream. Nil: never.
	Resync func()
	// Node is the name of this node's NATS server. In a cluster a
	// dispatcher makes its consumer anew only while this node leads the
	// queue's stream, so that a dispatcher about to be stopped (its node
	// lost the lead) does not fight the new leader's over the consumer.
	// "": always.
	Node string
	// Log is the dispatcher's logger; nil discards.
	Log *slog.Logger
	// Gate runs the dispatcher's goroutines (its loop, the deletes of
	// acked requests); Close closes it. Nil makes one of its own.
	Gate *subsystem.Gate
}

// Observer records what a dispatcher does with requests. Its methods are
// called with the dispatcher's lock held: they must take only leaf locks
// and never call back into the dispatcher.
type Observer interface {
	// Dispatched: j was handed to a worker at now.
	Dispatched(j *sched.Job, now time.Time)
	// Expired: j's deadline passed before it was dispatched.
	Expired(j *sched.Job)
	// Cancelled: j was cancelled (queued, or held by a worker).
	Cancelled(j *sched.Job)
	// DeadLettered: a request of queue was stored in the dead-letter queue
	// for reason.
	DeadLettered(queue, reason string)
}

// nopObserver records nothing.
type nopObserver struct{}

func (nopObserver) Dispatched(*sched.Job, time.Time) {}
func (nopObserver) Expired(*sched.Job)               {}
func (nopObserver) Cancelled(*sched.Job)             {}
func (nopObserver) DeadLettered(string, string)      {}

// check reports a missing required dependency.
func (deps *Deps) check() error {
	var errs []error
	if deps.Internal == nil {
		errs = append(errs, errors.New("dispatch: Deps.Internal is required"))
	}
	if deps.Egress == nil {
		errs = append(errs, errors.New("dispatch: Deps.Egress is required"))
	}
	if deps.Match == nil {
		errs = append(errs, errors.New("dispatch: Deps.Match is required"))
	}
	if deps.StoreDeadLetter == nil {
		errs = append(errs, errors.New("dispatch: Deps.StoreDeadLetter is required"))
	}
	return errors.Join(errs...)
}

// withDefaults fills the optional dependencies with ones that do nothing.
func (deps Deps) withDefaults() Deps {
	if deps.Interest == nil {
		deps.Interest = func(string, nats.Header) bool { return true }
	}
	if deps.BindJob == nil {
		deps.BindJob = func(string, string, string, api.AnswerChain) {}
	}
	if deps.EndJob == nil {
		deps.EndJob = func(string, string, *semaq.TokenError) {}
	}
	if deps.Served == nil {
		deps.Served = func(string, int64) {}
	}
	if deps.Observer == nil {
		deps.Observer = nopObserver{}
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Gate == nil {
		deps.Gate = subsystem.NewGate("dispatch")
	}
	return deps
}

// CancelRights is who may cancel a request without its cancel token
// (docs/queues.md, Cancel): anyone's (admins, the node), the requests a
// user published, or as a service those of its tenant.
type CancelRights struct {
	Any     bool
	User    string // the requests this store user published
	Service bool   // and, a service, every request of Tenant
	Tenant  string
	// Who names the sender in a refusal.
	Who string
}

// may reports whether r covers j.
func (r CancelRights) may(publisher, tenant string) bool {
	return r.Any || r.User != "" && r.User == publisher || r.Service && r.Tenant == tenant
}
