// Package filter runs server-side filtered subscriptions
// (docs/filtering.md): a pump per subscription pulls the stream through a
// JetStream consumer on the internal connection, evaluates the filter,
// acks what does not match and forwards what matches to the client
// (package pump). The client's acks go straight to JetStream, so
// redelivery works as for any consumer.
package filter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/pump"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/semaq"
)

const (
	// DefaultMax bounds the filtered subscriptions one node runs (each is
	// a JetStream consumer and a pump goroutine); past it START is refused
	// with ErrOverloaded. Deps.Max overrides it.
	DefaultMax = 1000
	// MaxAckPending bounds a filtered subscription's max_ack_pending.
	MaxAckPending = 10000
)

// Schemas is what the field check reads from the schema registry
// (*registry.Registry): the binding of a subject and its live versions.
type Schemas interface {
	BindingFor(natsSubject string) (registry.Binding, bool)
	Versions(ctx context.Context, subject string, deleted bool) ([]int, error)
	Version(ctx context.Context, subject, ver string, deleted bool) (*registry.Version, error)
}

// Deps is what the filters need from the node. Max bounds the filtered
// subscriptions on this node (0 is DefaultMax).
type Deps struct {
	pump.Deps
	// Schemas, when set, lets START judge the payload fields a filter
	// names (schema.go).
	Schemas Schemas
	// Delivered, when set, returns for a stream what to call on each
	// message forwarded (delivery latency by stream pattern).
	Delivered func(stream string) func(subject string, h nats.Header)
	// NC, the internal connection, when set, takes a durable over from
	// the other nodes of a cluster (take.go).
	NC *nats.Conn
	// Plugin, when set, returns the predicate of the filter-stage plugin
	// a START names, for the request in ctx; an error refuses the START.
	Plugin func(ctx context.Context, name string) (Predicate, error)
}

// Predicate is a filter-stage plugin's judgement of one message: keep it
// or not. It applies the plugin's failure policy itself.
type Predicate func(ctx context.Context, subject string, h nats.Header, data []byte) bool

// Service runs this node's filtered subscriptions. mu guards byDurable and
// is taken before the registry's; it is never held while a subscription
// stops (stopping waits for its consume goroutine).
//
// Goroutines: the reap loop (from New to Close) and, per subscription,
// the JetStream consume goroutine (from START to STOP, reap or Close).
type Service struct {
	deps Deps
	subs *pump.Registry[*sub]
	mu   sync.Mutex
	// byDurable maps stream/durable to the subscription serving it: a new
	// START for the same durable takes over (the old client is gone or
	// reconnecting).
	byDurable map[string]*sub
}

// sub is one filtered subscription.
type sub struct {
	id, stream, consumer string
	durable              bool
	deliver              string // deliver subject prefix
	prog                 *expr.Program
	plugin               Predicate // nil without one
	nc                   *nats.Conn
	cc                   jetstream.ConsumeContext
	delivered            func(subject string, h nats.Header)
	take                 *nats.Subscription // a durable's: takeover by another node; Service.mu
	ended                bool               // stopped; Service.mu
	claim                claim              // take.go

	lease                    pump.Lease
	stopping                 atomic.Bool
	matched, skipped, errors atomic.Uint64
	missing                  atomic.Uint64 // errors for a field or header the message lacks
	stopOnce                 sync.Once
}

// New makes the service and starts its reap loop, which ends the
// subscriptions whose clients stopped pinging; Close stops it.
func New(d Deps) (*Service, error) {
	var err error
	if d.Deps, err = d.Prepare(DefaultMax); err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	f := &Service{deps: d, subs: pump.NewRegistry[*sub](semaq.ErrFilterGone, "filter %s is not running"), byDurable: make(map[string]*sub)}
	f.subs.StartReaper(f.deps.Gate, pump.Heartbeat, func(p *sub) {
		f.deps.Log.Info("filter client gone", "id", p.id, "stream", p.stream, "consumer", p.consumer)
		f.stop(p)
	})
	return f, nil
}

// Handlers serves $SQ.API.FILTER.*. PING and STOP carry the node in the
// filter id, so they reach the node that runs the subscription.
func (f *Service) Handlers() api.Handlers {
	node := f.subs.Node() + ".*"
	stats := func(p *sub) any { return p.stats() }
	return api.Handlers{
		semaq.APIFilterStart:                    api.Op(f.deps.Log, "filter start", f.start, nil),
		fmt.Sprintf(semaq.APIFilterPingT, node): f.subs.Ping(f.deps.Log, stats),
		fmt.Sprintf(semaq.APIFilterStopT, node): f.subs.Handler(f.deps.Log, func(p *sub) any { f.stop(p); return p.stats() }),
	}
}

// Close ends every subscription (ephemeral consumers are deleted) and the
// reap loop, and waits for their goroutines. START is refused from then
// on. It runs at shutdown, before the internal connection drains.
func (f *Service) Close(ctx context.Context) error {
	if !f.subs.Close() {
		return nil
	}
	for _, p := range f.subs.All() {
		f.stopCtx(ctx, p)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return f.deps.Gate.Close(ctx)
}

// Running is the number of filtered subscriptions running now.
func (f *Service) Running() int { return f.subs.Len() }

// Totals sums the counters of the subscriptions running now.
func (f *Service) Totals() semaq.FilterStats {
	var t semaq.FilterStats
	for _, p := range f.subs.All() {
		st := p.stats()
		t.Matched += st.Matched
		t.Skipped += st.Skipped
		t.Errors += st.Errors
		t.MissingField += st.MissingField
	}
	return t
}

// words refuse a START.
var words = pump.Words{
	Bad:          badFilter,
	Overloaded:   "filter: this node runs %d filtered subscriptions, the most it allows; stop one or use another node",
	NotOurs:      "durable %s was created without a filter; use another name",
	OtherExpr:    "durable %s filters on %q, not %q; delete it or use another name",
	OtherSubject: "durable %s follows subject %s, not %s",
}

func badFilter(format string, args ...any) error {
	return semaq.NewAPIError(semaq.ErrBadRequest, "filter: "+format, args...)
}

func (f *Service) start(ctx context.Context, req *semaq.FilterStartRequest) (any, error) {
	if err := semaq.CheckSubject(req.Subject, true); err != nil {
		return nil, badFilter("%v", err)
	}
	if err := pump.CheckDeliver(req.DeliverSubject, badFilter); err != nil {
		return nil, err
	}
	if req.Durable != "" {
		if err := semaq.CheckConsumerName(req.Durable); err != nil {
			return nil, badFilter("%v", err)
		}
	}
	if err := pump.CheckLimits(req.MaxAckPending, req.AckWait, MaxAckPending, badFilter); err != nil {
		return nil, err
	}
	if err := f.deps.Authorize(ctx, req.Subject, req.DeliverSubject); err != nil {
		return nil, err
	}
	spec := specOf(req)
	stream, cons, src, err := f.deps.Locate(ctx, f.Running(), spec, words)
	if err != nil {
		return nil, err
	}
	if spec.Expr = src; src == "" && req.Plugin != "" {
		spec.Expr = "true"
	}
	if spec.Expr == "" {
		return nil, badFilter("the filter expression is empty")
	}
	var pred Predicate
	if req.Plugin != "" {
		if f.deps.Plugin == nil {
			return nil, badFilter("this broker runs no plugins")
		}
		if pred, err = f.deps.Plugin(ctx, req.Plugin); err != nil {
			return nil, err
		}
	}
	prog, err := f.deps.Env.Compile(spec.Expr)
	if err != nil {
		return nil, badFilter("%v", err)
	}
	var warnings []string
	for _, fp := range f.checkFields(ctx, req.Subject, prog) {
		if fp.closed && cons == nil {
			// A new filter that can never match is refused; a durable
			// resuming with its stored filter only hears about it.
			return nil, badFilter("%s", fp.msg)
		}
		warnings = append(warnings, fp.msg)
	}
	if cons == nil {
		if cons, err = f.deps.JS.CreateConsumer(ctx, stream, spec.Config()); err != nil {
			return nil, err
		}
	}
	cl := newClaim()
	if req.Durable != "" {
		f.takeOver(ctx, stream, req.Durable, cl)
	}

	p := &sub{
		claim:  cl,
		stream: stream, consumer: cons.CachedInfo().Name,
		durable: req.Durable != "", deliver: req.DeliverSubject, prog: prog, plugin: pred, nc: f.deps.Egress,
	}
	if f.deps.Delivered != nil {
		p.delivered = f.deps.Delivered(stream)
	}
	p.cc, err = pump.Consume(cons, p.handle, f.deps.Log, "filter consume", "stream", p.stream, "consumer", p.consumer)
	if err != nil {
		f.stop(p)
		return nil, err
	}

	f.mu.Lock()
	id, ok := f.subs.Add(p)
	if !ok {
		f.mu.Unlock()
		f.stop(p)
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "filter: the broker is shutting down")
	}
	p.id = id
	var old *sub
	if p.durable {
		old = f.byDurable[stream+"/"+p.consumer]
		f.byDurable[stream+"/"+p.consumer] = p
	}
	f.mu.Unlock()
	if old != nil {
		// The durable's previous client is gone or reconnecting; its pump
		// would split the messages with this one.
		f.stop(old)
	}
	if p.durable {
		f.listenTakeover(p)
	}
	return &semaq.FilterStartResponse{ID: p.id, Stream: stream, Consumer: p.consumer, Filter: spec.Expr, Heartbeat: pump.Heartbeat, Warnings: warnings}, nil
}

func specOf(req *semaq.FilterStartRequest) pump.Spec {
	return pump.Spec{Durable: req.Durable, Subject: req.Subject, AckWait: req.AckWait, MaxAckPending: req.MaxAckPending,
		StartSeq: req.StartSeq, Deliver: req.Deliver, MetaKey: semaq.MetadataFilter, Expr: req.Filter}
}

// handle runs on the consume goroutine, one message at a time, in stream
// order (redeliveries interleave as JetStream sends them).
func (p *sub) handle(jm jetstream.Msg) {
	if p.stopping.Load() {
		// Hand it back at once for whoever consumes next.
		_ = jm.Nak()
		return
	}
	ok, err := p.prog.Match(expr.Message{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data()})
	if err != nil {
		p.errors.Add(1)
		if missingField(err) {
			p.missing.Add(1)
		}
	}
	if ok && p.plugin != nil {
		ok = p.plugin(context.Background(), jm.Subject(), jm.Headers(), jm.Data())
	}
	if !ok {
		p.skipped.Add(1)
		_ = jm.Ack()
		return
	}
	p.matched.Add(1)
	h, err := pump.Forward(p.nc, p.deliver, jm)
	if err != nil {
		// Not acked: JetStream redelivers it after the ack wait.
		p.matched.Add(^uint64(0))
		_ = jm.Nak()
		return
	}
	if p.delivered != nil {
		p.delivered(jm.Subject(), h)
	}
}

// Lease is what the client's pings renew.
func (p *sub) Lease() *pump.Lease { return &p.lease }

func (p *sub) stats() semaq.FilterStats {
	return semaq.FilterStats{Matched: p.matched.Load(), Skipped: p.skipped.Load(), Errors: p.errors.Load(), MissingField: p.missing.Load()}
}

// missingField reports an evaluation that failed because the message lacks
// a field (or header) the filter reads: CEL's "no such key".
// A payload that is not JSON has no fields at all: counted as an error only.
func missingField(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "no such key") && !strings.Contains(msg, "not JSON")
}

// stop ends a subscription and forgets it; an ephemeral consumer is
// deleted.
func (f *Service) stop(p *sub) { f.stopCtx(context.Background(), p) }

func (f *Service) stopCtx(ctx context.Context, p *sub) {
	p.stopOnce.Do(func() {
		f.mu.Lock()
		f.subs.Remove(p.id, p)
		if k := p.stream + "/" + p.consumer; f.byDurable[k] == p {
			delete(f.byDurable, k)
		}
		take := p.take
		p.take, p.ended = nil, true
		f.mu.Unlock()
		if take != nil {
			_ = take.Unsubscribe()
		}
		p.stopping.Store(true)
		pump.Drain(ctx, p.cc)
		if !p.durable {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), api.Timeout)
			defer cancel()
			if err := f.deps.JS.DeleteConsumer(ctx, p.stream, p.consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				f.deps.Log.Warn("deleting filter consumer", "stream", p.stream, "consumer", p.consumer, "err", err)
			}
		}
	})
}
