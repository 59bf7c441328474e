package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/semaq"
)

// The end-to-end measure (IngestConfig.E2E). During the paced phase a
// consumer on each target's stream receives the messages the pacer
// publishes; a message's latency is the time from its publish call to its
// receipt by the consumer, both read from the process's monotonic clock.
//
// The consumer is the one a SemaQ application gets from client.Subscribe:
// an ephemeral pull consumer (explicit acks, ack wait 30 s, at most 10,000
// unacknowledged, starting with the next message stored), read in pulls of
// 128 messages that wait at most a second at the server, a new pull when
// one is used up. The reader does the same through nats.go's jetstream
// package for both targets, since the SDK cannot subscribe on the raw
// server (plain JetStream), on a connection of its own as an application
// would have: the public user's on the broker for SemaQ, a plain one for
// raw. It acks each message without waiting for the server's confirmation:
// the SDK's Ack waits a round trip, and a reader that did so would time its
// own acks rather than the delivery.
//
// Each latency is also split where the message's own stamps allow: the
// stream's store time (JetStream's timestamp of the message) and, through
// the ingress, its AI-Received stamp. Those are wall-clock times of the same
// process; each is subtracted from the wall-clock time of the receipt, so
// only short wall-clock intervals are used, and the part before it is the
// monotonic whole minus that.
//
// The send time travels in the message, in the header hdrSent, as
// nanoseconds since the phase's epoch, so nothing is kept per message in
// flight and the memory of the measure does not grow with the rate or the
// consumer's lag: per target one histogram per rate, a few counters, and
// nats.go's buffer of the pull in progress (at most e2ePrefetch messages).
// The consumer's MaxAckPending bounds what the server holds for it.

const (
	// hdrSent carries a paced message's publish time, in nanoseconds since
	// the epoch of the phase, when the end-to-end measure runs. Both
	// targets' messages carry it; the ingress stores it like any header
	// outside the envelope.
	hdrSent = "Semaq-Bench-Sent"
	// e2ePrefetch and e2eFetchWait are the pull of client.Subscribe: its
	// default prefetch and its fetchWait.
	e2ePrefetch  = 128
	e2eFetchWait = time.Second
	// e2eMaxAckPending and e2eAckWait are client.Subscribe's consumer.
	e2eMaxAckPending = 10000
	e2eAckWait       = 30 * time.Second
)

// stampSent returns a copy of h with hdrSent set to ns. The values of h are
// shared, not copied: no one changes them.
func stampSent(h nats.Header, ns int64) nats.Header {
	out := make(nats.Header, len(h)+1)
	maps.Copy(out, h)
	out[hdrSent] = []string{strconv.FormatInt(ns, 10)}
	return out
}

// e2eReader is one target's consumer for the whole paced phase. Its read
// loop times every first delivery whose send time falls in the current
// slice; begin and end, called by the phase between slices, open and close
// a slice.
type e2eReader struct {
	target string
	stream string
	nc     *nats.Conn
	js     jetstream.JetStream
	cons   jetstream.Consumer
	epoch  time.Time

	cur  atomic.Pointer[e2eSlice]
	stop chan struct{}
	done chan struct{} // closed when the read loop has returned
	err  error         // why the read loop ended early; read after done

	// stale counts deliveries no open slice took: sent in a slice already
	// closed (received after its drain bound), or without a send time.
	stale atomic.Int64
}

// e2eSlice is what one slice's messages did at the consumer.
type e2eSlice struct {
	start int64 // since the epoch; a message sent before it is of an earlier slice
	h     *e2eHists

	mu          sync.Mutex
	received    int64 // first deliveries, timed
	redelivered int64 // later deliveries, not timed
	last        int64 // since the epoch, of the latest receipt
	want        int64 // set by end; reached closes once received is at least want
	wantSet     bool
	reached     chan struct{}
	signalled   bool
	finished    bool // counted; later deliveries go to stale
}

// e2eHists are the histograms of one target at one rate: publish to
// receipt, and its parts.
type e2eHists struct {
	lat       *measure.Histogram // publish to receipt
	toIngress *measure.Histogram // publish to the ingress's AI-Received stamp; SemaQ targets only
	toStore   *measure.Histogram // publish to the stream's store time
	toReceipt *measure.Histogram // the stream's store time to receipt
}

func newE2EHists() *e2eHists {
	return &e2eHists{lat: measure.NewHistogram(), toIngress: measure.NewHistogram(), toStore: measure.NewHistogram(), toReceipt: measure.NewHistogram()}
}

// e2eCounts is what one slice, or several added up, received.
type e2eCounts struct {
	received, redelivered int64
	elapsed               time.Duration // from the slice's start to its last receipt, at least its duration
}

func (c *e2eCounts) add(o e2eCounts) {
	c.received += o.received
	c.redelivered += o.redelivered
	c.elapsed += o.elapsed
}

// newE2EReader connects a consumer to target t's stream, as client.Subscribe
// would, starting with the next message stored, and starts reading.
func newE2EReader(ctx context.Context, r *Rig, t *Target, epoch time.Time) (_ *e2eReader, err error) {
	nc, err := t.Dial(r, "semaq-bench-e2e-"+t.Name)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: consumer connection: %w", t.Name, err)
	}
	defer func() {
		if err != nil {
			nc.Close()
		}
	}()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", t.Name, err)
	}
	stream, filter := t.Stream, t.subject
	if stream == "" {
		stream = cmp.Or(t.jsStream, JetStreamStream)
		filter = cmp.Or(t.stored, t.subject)
	}
	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		FilterSubject:     filter,
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           e2eAckWait,
		MaxAckPending:     e2eMaxAckPending,
		InactiveThreshold: 5 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %s: creating a consumer on %s: %w", t.Name, stream, err)
	}
	rd := &e2eReader{
		target: t.Name, stream: stream, nc: nc, js: js, cons: cons, epoch: epoch,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	go rd.loop()
	return rd, nil
}

// loop pulls and times messages until stop, or until a pull fails.
func (rd *e2eReader) loop() {
	defer close(rd.done)
	for {
		b, err := rd.cons.Fetch(e2ePrefetch, jetstream.FetchMaxWait(e2eFetchWait))
		if err != nil {
			select {
			case <-rd.stop:
			default:
				rd.err = fmt.Errorf("pulling from %s: %w", rd.stream, err)
			}
			return
		}
	pull:
		for {
			select {
			case jm, ok := <-b.Messages():
				if !ok {
					// A pull that expires before filling is the normal
					// end of one in a quiet moment.
					if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
						select {
						case <-rd.stop:
						default:
							rd.err = fmt.Errorf("pulling from %s: %w", rd.stream, err)
						}
						return
					}
					break pull
				}
				rd.record(jm, time.Now())
				_ = jm.Ack() // a lost ack means a redelivery after the ack wait, which is not timed
			case <-rd.stop:
				return
			}
		}
	}
}

// record times jm, received at at, in the open slice.
func (rd *e2eReader) record(jm jetstream.Msg, at time.Time) {
	s := rd.cur.Load()
	h := jm.Headers()
	sent, err := strconv.ParseInt(h.Get(hdrSent), 10, 64)
	if err != nil || s == nil || sent < s.start {
		rd.stale.Add(1)
		return
	}
	now := int64(at.Sub(rd.epoch))
	var stored, ingress time.Time
	again := false
	if md, err := jm.Metadata(); err == nil {
		again, stored = md.NumDelivered > 1, md.Timestamp
	}
	if v := h.Get(semaq.HdrReceived); v != "" {
		ingress, _ = time.Parse(time.RFC3339Nano, v)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.finished:
		rd.stale.Add(1)
		return
	case again:
		s.redelivered++
		return
	}
	s.received++
	s.last = now
	whole := time.Duration(now - sent)
	s.h.lat.Record(whole)
	if !stored.IsZero() {
		after := at.Sub(stored) // both wall clock: at has a monotonic reading, stored none
		s.h.toReceipt.Record(after)
		s.h.toStore.Record(whole - after)
	}
	if !ingress.IsZero() {
		s.h.toIngress.Record(whole - at.Sub(ingress))
	}
	s.signal()
}

// signal closes reached once end has set want and it has been reached;
// s.mu held.
func (s *e2eSlice) signal() {
	if s.wantSet && !s.signalled && s.received >= s.want {
		s.signalled = true
		close(s.reached)
	}
}

// begin opens a slice: from now, messages sent are timed into h.
func (rd *e2eReader) begin(h *e2eHists) {
	rd.cur.Store(&e2eSlice{start: int64(time.Since(rd.epoch)), h: h, reached: make(chan struct{})})
}

// end waits until the open slice has received want messages, at most
// drain, and closes it. d is the slice's paced duration, the least time
// its receive rate is counted over. Only ctx ending or the read loop
// failing is an error: what did not arrive in time shows in the counts.
func (rd *e2eReader) end(ctx context.Context, want int64, d, drain time.Duration) (e2eCounts, error) {
	s := rd.cur.Load()
	if s == nil {
		return e2eCounts{}, errors.New("bench: no end-to-end slice is open")
	}
	defer rd.cur.Store(nil)
	s.mu.Lock()
	s.want, s.wantSet = want, true
	s.signal()
	s.mu.Unlock()
	timer := time.NewTimer(drain)
	defer timer.Stop()
	select {
	case <-s.reached:
	case <-timer.C:
	case <-rd.done:
		if rd.err != nil {
			return e2eCounts{}, fmt.Errorf("bench: %s: end-to-end consumer: %w", rd.target, rd.err)
		}
	case <-ctx.Done():
		return e2eCounts{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true
	return e2eCounts{
		received:    s.received,
		redelivered: s.redelivered,
		elapsed:     max(d, time.Duration(s.last-s.start)),
	}, nil
}

// close stops the read loop, deletes the consumer and closes the
// connection.
func (rd *e2eReader) close() {
	close(rd.stop)
	<-rd.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rd.js.DeleteConsumer(ctx, rd.stream, rd.cons.CachedInfo().Name)
	rd.nc.Close()
}
