package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/reserved"
)

// The dispatcher's stream consumer, semaq-dispatch. It delivers every
// request of the queue's stream once, headers only, and holds it (acks
// only when the request is done) so JetStream keeps it: a broker restart
// loses nothing queued.
//
// If the consumer goes (deleted, paused, redefined by someone with the
// rights to, or lost with its heartbeats), the dispatcher notices within
// consumerCheck, logs it at warn and makes the consumer anew. The new one
// delivers again every request still in the stream; each delivery gets a
// generation number, and the dispatcher recognises a request by sequence:
//   - indexed already (queued, delayed or held by a worker): it keeps its
//     place and its lease; only its ack subject is brought up to date;
//   - below the highest sequence ever indexed and not indexed: it is done
//     (its ack went to the lost consumer), so the dispatcher acks it now;
//   - otherwise it is new.
// A done request whose latest delivery came from a consumer that is gone
// is removed by sequence (stream message delete) rather than acked.

// consumerCheck is how often the dispatcher asks JetStream about its
// consumer, besides reacting to the consumer's own errors at once.
const consumerCheck = time.Second

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
	if err := d.stream.DeleteConsumer(ctx, reserved.DispatchConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("resetting dispatch consumer: %w", err)
	}
	cons, err := d.stream.CreateConsumer(ctx, d.consumerConfig())
	if err != nil {
		return fmt.Errorf("dispatch consumer: %w", err)
	}
	d.mu.Lock()
	d.gen++
	gen := d.gen
	d.mu.Unlock()
	cc, err := cons.Consume(handle(d, func(jm jetstream.Msg) { d.onRequest(gen, jm) }), jetstream.PullMaxMessages(1024),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			switch {
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
				errors.Is(err, jetstream.ErrNoHeartbeat):
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
		}
	}
	if why == "" {
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
