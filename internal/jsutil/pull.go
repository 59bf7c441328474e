package jsutil

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrPullStopped is returned by Puller.Next when its stop channel closes.
var ErrPullStopped = errors.New("jsutil: pull stopped")

// Puller reads a pull consumer one message at a time: one Fetch of a batch,
// handed out message by message, then the next Fetch once the batch is
// used up, so what it holds is bounded by one batch however slowly it is
// read. The SDK's subscriptions and the HTTP event streams read through it.
// Not safe for concurrent use; Drain may follow a Next that returned.
type Puller struct {
	cons  jetstream.Consumer
	batch jetstream.MessageBatch // nil: the next Next fetches
}

// NewPuller reads cons.
func NewPuller(cons jetstream.Consumer) *Puller { return &Puller{cons: cons} }

// Next returns the next message. With no batch open it fetches up to n
// messages with opts; a pull that ends without (more) messages (NoMessage)
// is pulled again. It returns ctx.Err() once ctx ends and ErrPullStopped
// once stop (nil: never) closes, whichever it sees first, and any other
// error of a Fetch or of a pull as it is.
func (p *Puller) Next(ctx context.Context, stop <-chan struct{}, n int, opts ...jetstream.FetchOpt) (jetstream.Msg, error) {
	for {
		select {
		case <-stop:
			return nil, ErrPullStopped
		case <-ctx.Done():
			return nil, ctx.Err()
		default:
		}
		if p.batch == nil {
			b, err := p.cons.Fetch(n, opts...)
			if err != nil {
				return nil, err
			}
			p.batch = b
		}
		select {
		case jm, ok := <-p.batch.Messages():
			if ok {
				return jm, nil
			}
			err := p.batch.Error()
			p.batch = nil
			if err != nil && !NoMessage(err) {
				return nil, err
			}
		case <-stop:
			return nil, ErrPullStopped
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// NoMessage reports whether err, the error a pull ended with, only means
// that this pull is over and the consumer can be pulled again: the server's
// 408 (the pull's wait expired) and 404 (nothing to deliver), a deadline of
// the fetch, missed heartbeats, and a 409 after the consumer's leader moved
// (the consumer lives on at its new leader). A deleted consumer, a refused
// request or a closed connection are not.
func NoMessage(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
		errors.Is(err, jetstream.ErrConsumerLeadershipChanged)
}

// Drain calls f for each message the open pull still delivers, until it
// ends or wait passes, and closes it: a Close hands back (naks) what was
// pulled and not read, rather than leave it to the ack wait.
func (p *Puller) Drain(wait time.Duration, f func(jetstream.Msg)) {
	if p == nil || p.batch == nil {
		return
	}
	expire := time.NewTimer(wait)
	defer expire.Stop()
	msgs := p.batch.Messages()
	p.batch = nil
	for {
		select {
		case jm, ok := <-msgs:
			if !ok {
				return
			}
			f(jm)
		case <-expire.C:
			return
		}
	}
}
