// Package pump is what the broker's consumer pumps share: a pump pulls a
// stream through a JetStream consumer on the internal connection and
// forwards messages to a client's deliver subject with the JetStream ack
// subject in semaq.HdrFilterAck (NATS refuses a client publish whose reply
// is a $JS.ACK subject), so the client acks straight to JetStream.
//
// Filtered subscriptions (internal/broker/filter) and key-shared groups
// (internal/broker/keyshared) are built on it. It holds no state of its
// own beyond what a caller makes: leases renewed by client pings, a reap
// loop that ends what was not renewed, the drain of a consume context with
// a fallback, the consumer configuration (deliver policy, defaults) and the
// check that a durable resumed by name is the one the client asked for.
package pump

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/semaq"
)

const (
	// Heartbeat is how often clients ping what they started; a lease not
	// renewed for Expiry heartbeats ends.
	Heartbeat = 2 * time.Second
	Expiry    = 3
	// drainWait bounds the wait for a consume context to drain before it
	// is stopped outright.
	drainWait = 5 * time.Second
)

// Lease is the time of a client's last ping, on the process's monotonic
// clock (a step of the wall clock ends no lease). The zero Lease has
// expired; safe for concurrent use.
type Lease struct{ last atomic.Int64 } // nanoseconds since epoch

// epoch is the origin of Lease times: a time.Now reading, so Sub on it
// uses the monotonic clock.
var epoch = time.Now()

// Renew records a ping now.
func (l *Lease) Renew() { l.last.Store(max(int64(time.Since(epoch)), 1)) }

// Before reports whether the last ping came before t, a time.Now reading.
func (l *Lease) Before(t time.Time) bool {
	last := l.last.Load()
	return last == 0 || last < int64(t.Sub(epoch))
}

// reaper ends, every period, what the clients stopped pinging: the leases
// not renewed for Expiry heartbeats. It runs one goroutine from
// startReaper until stop.
type reaper struct {
	quit, done chan struct{}
	once       sync.Once
}

// startReaper starts the reap loop. Each period it calls expired with the
// cutoff (with the caller's locks taken inside it, as it needs) and then
// end on each thing it returned, outside those locks.
func startReaper[T any](gate *subsystem.Gate, period time.Duration, expired func(cutoff time.Time) []T, end func(T)) *reaper {
	r := &reaper{quit: make(chan struct{}), done: make(chan struct{})}
	if !gate.Go("reaper", func(ctx context.Context) {
		defer close(r.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-r.quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for _, x := range expired(time.Now().Add(-Expiry * Heartbeat)) {
				end(x)
			}
		}
	}) {
		close(r.done) // the node is stopping: nothing to reap
	}
	return r
}

// stop ends the loop and waits for it; a sweep under way finishes first.
// Safe to call more than once.
func (r *reaper) stop() {
	r.once.Do(func() { close(r.quit) })
	<-r.done
}

// Consume starts pulling cons into handle, one message at a time on the
// consume goroutine. Consume errors other than missed heartbeats are
// logged at debug level with attrs.
func Consume(cons jetstream.Consumer, handle jetstream.MessageHandler, log *slog.Logger, what string, attrs ...any) (jetstream.ConsumeContext, error) {
	return cons.Consume(handle,
		jetstream.PullMaxMessages(256),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				log.Debug(what, append(attrs, "err", err)...)
			}
		}))
}

// Drain stops cc after the messages it has pulled are handled, waiting for
// its handler; if that takes longer than five seconds or ctx ends first,
// cc is stopped outright and what it held is redelivered after the ack
// wait.
func Drain(ctx context.Context, cc jetstream.ConsumeContext) {
	if cc == nil {
		return
	}
	cc.Drain()
	t := time.NewTimer(drainWait)
	defer t.Stop()
	select {
	case <-cc.Closed():
	case <-t.C:
		cc.Stop()
	case <-ctx.Done():
		cc.Stop()
	}
}

// Forward sends jm to deliver.<subject> on nc with its ack subject in
// semaq.HdrFilterAck, and returns the headers it sent. jm is not acked.
func Forward(nc *nats.Conn, deliver string, jm jetstream.Msg) (nats.Header, error) {
	h := jm.Headers()
	if h == nil {
		h = make(nats.Header, 1)
	}
	h[semaq.HdrFilterAck] = []string{jm.Reply()}
	return h, nc.PublishMsg(&nats.Msg{Subject: deliver + "." + jm.Subject(), Header: h, Data: jm.Data()})
}
