package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
)

// The dispatcher's stream consumer, semaq-dispatch. It delivers every
// request of the queue's stream once, headers only, and holds it (acks
// only when the request is done) so JetStream keeps it: a broker restart
// loses nothing queued.
//
// It is made anew at every start: its deliveries rebuild the index from
// what the stream holds, JetStream's own record of what is not done, and
// the lease store (leases.go) says which of those a worker holds. Keeping
// a consumer across starts would hide the requests it had delivered to
// the previous dispatcher until its ack wait (a day), and reading them
// back by sequence would ship every payload to rebuild a headers-only
// index.
//
// If the consumer goes (deleted, paused, redefined by someone with the
// rights to, lost with its heartbeats, or its Raft leader moved, which may
// drop deliveries in flight), the dispatcher notices within consumerCheck,
// logs it at warn and makes the consumer anew. The new one delivers again
// every request still in the stream; each delivery gets a generation
// number, and the dispatcher recognises a request by sequence:
//   - indexed already (queued, delayed or held by a worker): it keeps its
//     place and its lease; only its ack subject is brought up to date;
//   - done, or being dead-lettered, and its removal from the stream not
//     yet confirmed (removing, leaving): left alone;
//   - otherwise it is new.
// A request leaves the index as done only once JetStream has confirmed
// its removal (ack with reply, or delete by sequence when its latest
// delivery came from a consumer that is gone), so a done request is never
// delivered again as new.

// consumerCheck is how often the dispatcher asks JetStream about its
// consumer, besides reacting to the consumer's own errors at once.
const consumerCheck = time.Second

// consumeExpiry and consumeHeartbeat are the dispatcher's pull requests'
// life and heartbeat.
const (
	consumeExpiry    = 5 * time.Second
	consumeHeartbeat = time.Second
)

// dispatchAckWait: the dispatcher acks when a request is done, however
// long it waits; a redelivery after this is recognised by sequence.
const dispatchAckWait = 24 * time.Hour

func (d *Dispatcher) consumerConfig() jetstream.ConsumerConfig {
	maxPending := d.cfg.MaxMessages*2 + 1024
	if maxPending > 1<<30 {
		maxPending = 1 << 30
	}
	return jetstream.ConsumerConfig{
		Durable:       reserved.DispatchConsumer,
		Description:   "SemaQ dispatcher: holds every request until it is done",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       dispatchAckWait,
		MaxDeliver:    -1,
		MaxAckPending: int(maxPending),
		// The index needs the headers; payloads are read at dispatch.
		HeadersOnly: true,
	}
}

// intact reports whether a consumer's configuration is still the
// dispatcher's.
func (d *Dispatcher) intact(c *jetstream.ConsumerConfig) bool {
	want := d.consumerConfig()
	return c.DeliverPolicy == want.DeliverPolicy && c.AckPolicy == want.AckPolicy && c.AckWait == want.AckWait &&
		c.MaxDeliver == want.MaxDeliver && c.MaxAckPending == want.MaxAckPending && c.HeadersOnly &&
		c.FilterSubject == "" && len(c.FilterSubjects) == 0 && c.RateLimit == 0 && len(c.BackOff) == 0
}

// openConsumer makes the consumer anew and consumes it under a new
// generation. One of the same name is deleted first: left by a previous
// run, or altered behind the dispatcher's back.
func (d *Dispatcher) openConsumer(ctx context.Context) error {
	if err := jsutil.Retry(ctx, func(ctx context.Context) error {
		err := d.stream.DeleteConsumer(ctx, reserved.DispatchConsumer)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("resetting dispatch consumer: %w", err)
	}
	var cons jetstream.Consumer
	if err := jsutil.Retry(ctx, func(ctx context.Context) (err error) {
		cons, err = d.stream.CreateConsumer(ctx, d.consumerConfig())
		return err
	}); err != nil {
		return fmt.Errorf("dispatch consumer: %w", err)
	}
	d.mu.Lock()
	d.gen++
	gen := d.gen
	d.mu.Unlock()
	// Short pulls with frequent heartbeats: a pull request is state of the
	// consumer's leader and goes with it when the leadership moves; the
	// consume loop notices the missing heartbeats and pulls again within
	// about consumeHeartbeat × 2 rather than JetStream's default minute.
	cc, err := cons.Consume(handle(d, func(jm jetstream.Msg) { d.onRequest(gen, jm) }), jetstream.PullMaxMessages(1024),
		jetstream.PullExpiry(consumeExpiry), jetstream.PullHeartbeat(consumeHeartbeat),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			switch {
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
				errors.Is(err, jetstream.ErrNoHeartbeat), errors.Is(err, jetstream.ErrConsumerLeadershipChanged):
				d.kickCheck()
			default:
				d.log.Debug("dispatch consumer", "err", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("consuming: %w", err)
	}
	d.consMu.Lock()
	d.cons, d.consume = cons, cc
	d.consMu.Unlock()
	d.consSince, d.consCreated = time.Time{}, cons.CachedInfo().Created
	d.leaderMoved(cons.CachedInfo().Cluster) // its leader when made, if elected already
	return nil
}

// kickCheck asks the loop to check the consumer now.
func (d *Dispatcher) kickCheck() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// stopConsuming stops the current consume loop, if any.
func (d *Dispatcher) stopConsuming() {
	d.consMu.Lock()
	cc := d.consume
	d.consume = nil
	d.consMu.Unlock()
	if cc != nil {
		cc.Stop()
	}
}

// checkConsumer makes the consumer anew if it is gone, paused or altered.
// It runs on the loop's goroutine.
func (d *Dispatcher) checkConsumer() {
	d.consMu.Lock()
	cons := d.cons
	d.consMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
	defer cancel()
	if d.deps.Node != "" && d.deps.Resync != nil && !d.leadsStream(ctx) {
		// Started on a view of the cluster that has changed: the node
		// stops this dispatcher once it sees the stream's new leader.
		d.deps.Resync()
	}
	var why string
	if cons == nil {
		why = "not running (an earlier attempt failed)"
	} else {
		info, err := cons.Info(ctx)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDeleted):
			why = "deleted"
		case err != nil:
			d.log.Debug("dispatch consumer info", "err", err)
			return // JetStream busy or away: ask again later
		case info.Paused:
			why = "paused"
		case !d.intact(&info.Config):
			why = "redefined"
		case !info.Created.Equal(d.consCreated):
			// Deleted and made again under its name, by another
			// dispatcher of the queue (one that has not heard it no
			// longer leads, or this one's successor): its deliveries go
			// to whichever pulls first, and those the other takes would
			// wait for the ack wait (a day) before this one saw them.
			why = "made anew by another dispatcher"
		case d.leaderMoved(info.Cluster):
			// Deliveries the former leader sent as it went may never
			// have arrived, and the new one will not send them again
			// (dispatchAckWait): a consumer made anew delivers every
			// request in the stream, and the index keeps what it holds.
			why = "its leader moved"
		}
	}
	if why == "" {
		return
	}
	if !d.leadsStream(ctx) {
		d.log.Info("dispatch consumer lost, but this node no longer leads the queue's stream; leaving it to the leader's dispatcher", "reason", why)
		d.stopConsuming() // so that it does not take the deliveries of the leader's
		return
	}
	d.log.Warn("dispatch consumer lost; making it anew (held jobs keep their leases)", "reason", why)
	d.stopConsuming()
	d.consMu.Lock()
	d.cons = nil
	d.consMu.Unlock()
	if err := d.openConsumer(ctx); err != nil {
		d.log.Warn("dispatch consumer could not be made anew; trying again", "err", err)
		return
	}
	d.mu.Lock()
	d.stats.consumerRecoveries++
	d.mu.Unlock()
}

// leaderMoved reports whether the consumer's Raft leadership changed
// since it was last seen (a new leader, or a new term of the same one),
// and remembers the new one. The consumer's leader may differ from the
// stream's: nothing requires them on one node, since the dispatcher's
// pulls and acks reach the consumer's leader wherever it is. Runs on the
// loop's goroutine (or in start, before it).
func (d *Dispatcher) leaderMoved(ci *jetstream.ClusterInfo) bool {
	if ci == nil || ci.Leader == "" || ci.LeaderSince == nil {
		return false
	}
	prev := d.consSince
	d.consSince = *ci.LeaderSince
	return !prev.IsZero() && !prev.Equal(*ci.LeaderSince)
}

// leadsStream reports whether this node leads the queue's stream, or
// cannot tell (single node, no name, JetStream not answering).
func (d *Dispatcher) leadsStream(ctx context.Context) bool {
	if d.deps.Node == "" {
		return true
	}
	info, err := d.stream.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		return true
	}
	return info.Cluster.Leader == d.deps.Node
}
