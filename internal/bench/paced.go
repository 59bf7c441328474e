package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/bench/measure"
)

// The paced phase offers a target a fixed message rate, open loop: message i
// of a slice is due at start + i/rate whatever happened to the messages
// before it, so a slow target meets a queue rather than a politely waiting
// publisher. Each acknowledged message's publish-to-ack time goes into an
// HDR histogram.
//
// The pacer sleeps until the next message is due and then sends every
// message whose time has come. Timers are coarse (about 1 ms on Linux VMs),
// so at rates above 1k msgs/s messages leave in small bursts; the
// latencies are still each message's own, from its publish call.

const (
	// PacerSlack is how far behind its time a message may be sent and still
	// count as on time: a little more than the timer granularity.
	PacerSlack = 2 * time.Millisecond
	// pacedDrainTimeout bounds the wait for the acks still in flight when a
	// paced slice ends. Messages not acknowledged by then are reported as
	// unacknowledged, not waited for.
	pacedDrainTimeout = 10 * time.Second
	// sustainedLoss is the share of offered messages a target may fail to
	// take (skipped, unacknowledged or failed) and still count as having
	// sustained the rate.
	sustainedLoss = 0.01
)

// pacer publishes one target's messages at an offered rate, on the
// connection of the target's first publisher with a JetStream context of
// its own, so its acks can be timed one by one.
type pacer struct {
	js     jetstream.JetStream
	tmpl   *nats.Msg
	window int
	drain  time.Duration // pacedDrainTimeout; shorter in tests
	cur    atomic.Pointer[pacedSlice]
	// stamp gives every message its send time in hdrSent, in nanoseconds
	// since epoch, for the end-to-end measure (e2e.go).
	stamp bool
	epoch time.Time
}

// pacedSlice is the state of one slice: the messages in flight with their
// send times, and what came back.
type pacedSlice struct {
	mu       sync.Mutex
	inflight map[*nats.Msg]time.Time
	lat      *measure.Histogram
	acked    int64
	failed   int64
	firstErr error
	last     time.Time     // of the latest ack or failure
	closing  bool          // all sent; drained closes when inflight empties
	drained  chan struct{} // closed once closing and nothing is in flight
	finished bool          // counted; later outcomes are ignored
}

// pacedCounts is what one slice, or several added up, did.
type pacedCounts struct {
	offered, sent, skipped, late, acked, failed, unacked int64
	elapsed                                              time.Duration
	firstErr                                             error
}

func (c *pacedCounts) add(o pacedCounts) {
	c.offered += o.offered
	c.sent += o.sent
	c.skipped += o.skipped
	c.late += o.late
	c.acked += o.acked
	c.failed += o.failed
	c.unacked += o.unacked
	c.elapsed += o.elapsed
	if c.firstErr == nil {
		c.firstErr = o.firstErr
	}
}

func newPacer(p *publisher, window int) (*pacer, error) {
	pc := &pacer{tmpl: p.msg, window: window, drain: pacedDrainTimeout}
	js, err := jetstream.New(p.nc,
		// The pacer keeps its own in-flight count at most window, which is
		// never below JetStream's (acks leave JetStream's table before the
		// handler runs), so publishing never stalls; the headroom covers
		// acks of an earlier slice that never came.
		jetstream.WithPublishAsyncMaxPending(4*window),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { pc.done(m, nil) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { pc.done(m, err) }),
	)
	if err != nil {
		return nil, fmt.Errorf("bench: pacer: %w", err)
	}
	pc.js = js
	return pc, nil
}

// done records the outcome of message m, if it belongs to the current slice.
func (pc *pacer) done(m *nats.Msg, err error) {
	now := time.Now()
	s := pc.cur.Load()
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sent, ok := s.inflight[m]
	if !ok || s.finished {
		return // a message of an earlier slice, acknowledged after its drain timeout
	}
	delete(s.inflight, m)
	s.last = now
	if err != nil {
		s.failed++
		if s.firstErr == nil {
			s.firstErr = err
		}
	} else {
		s.acked++
		s.lat.Record(now.Sub(sent))
	}
	if s.closing && len(s.inflight) == 0 {
		close(s.drained)
	}
}

// run offers rate msgs/s for d, then waits (bounded) for the acks in flight,
// recording each ack's latency in h. Only ctx ending is an error: a target
// that cannot keep up shows in the counts.
func (pc *pacer) run(ctx context.Context, rate int, d time.Duration, h *measure.Histogram) (pacedCounts, error) {
	s := &pacedSlice{inflight: make(map[*nats.Msg]time.Time, pc.window), lat: h, drained: make(chan struct{})}
	pc.cur.Store(s)
	defer pc.cur.Store(nil)

	var c pacedCounts
	c.offered = int64(rate) * int64(d) / int64(time.Second)
	slot := func(i int64) time.Duration { return time.Duration(i * int64(time.Second) / int64(rate)) }
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	start := time.Now()
	for i := int64(0); i < c.offered; {
		now := time.Now()
		if wait := slot(i) - now.Sub(start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return c, ctx.Err()
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return c, err
		}
		// Everything due by now goes out, unless the window is full: a
		// message that cannot be sent at its time is skipped, not sent late,
		// so the offered load stays open loop and bounded.
		for ; i < c.offered && slot(i) <= now.Sub(start); i++ {
			s.mu.Lock()
			full := len(s.inflight) >= pc.window
			s.mu.Unlock()
			if full || pc.js.PublishAsyncPending() >= 4*pc.window {
				c.skipped++
				continue
			}
			if now.Sub(start)-slot(i) > PacerSlack {
				c.late++
			}
			m := &nats.Msg{Subject: pc.tmpl.Subject, Header: pc.tmpl.Header, Data: pc.tmpl.Data}
			sent := time.Now() // before publishing: the ack may beat PublishMsgAsync's return
			if pc.stamp {
				m.Header = stampSent(pc.tmpl.Header, int64(sent.Sub(pc.epoch)))
			}
			s.mu.Lock()
			s.inflight[m] = sent
			s.mu.Unlock()
			if _, err := pc.js.PublishMsgAsync(m); err != nil {
				s.mu.Lock()
				delete(s.inflight, m)
				s.failed++
				if s.firstErr == nil {
					s.firstErr = err
				}
				s.mu.Unlock()
				continue
			}
			c.sent++
		}
	}
	sendEnd := time.Now()

	s.mu.Lock()
	s.closing = true
	if len(s.inflight) == 0 {
		close(s.drained)
	}
	s.mu.Unlock()
	timer.Reset(pc.drain)
	select {
	case <-s.drained:
	case <-timer.C:
	case <-ctx.Done():
		return c, ctx.Err()
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true // late acks must not touch h once the caller has it back
	c.acked, c.failed, c.unacked, c.firstErr = s.acked, s.failed, int64(len(s.inflight)), s.firstErr
	// The slice lasts d at least (its last message is due just before d),
	// and until its last ack.
	c.elapsed = max(d, sendEnd.Sub(start), s.last.Sub(start))
	return c, nil
}
