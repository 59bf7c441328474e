package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

// WithFilter makes the subscription server-side filtered: the broker
// evaluates the CEL expression (docs/expressions.md) on every message and
// sends only the matches; the rest are acknowledged by the broker. Acks,
// naks and redelivery work as without a filter. With WithDurable the filter
// is stored with the durable: a later Subscribe with the same name resumes
// with it (WithFilter may then be left out, and a different expression is
// refused). A message the expression fails on (a missing field, a type
// mismatch) does not match. See docs/filtering.md.
func WithFilter(expr string) SubscribeOption {
	return func(o *subscribeOptions) error {
		if strings.TrimSpace(expr) == "" {
			return errors.New("client: WithFilter: the expression is empty")
		}
		o.filter = expr
		return nil
	}
}

// msgSource feeds a Subscription from something other than its own pull
// consumer. next blocks until a message arrives, ctx is done or done is
// closed (then it returns ErrSubscriptionDone); it is called by one
// goroutine at a time. close is called once, after done is closed.
type msgSource interface {
	next(ctx context.Context, done <-chan struct{}) (jetstream.Msg, error)
	close() error
}

// filterSource receives the matches a broker-side filter forwards to an
// inbox, and keeps the filter alive with pings. When the broker no longer
// runs the filter (it restarted), the next ping starts it again: a durable
// resumes where it was, an ephemeral after the last message returned.
type filterSource struct {
	c      *Client
	req    semaq.FilterStartRequest
	inbox  string
	sub    *nats.Subscription
	ch     chan *nats.Msg
	stopHB chan struct{}
	hbDone chan struct{}

	warnings []string // from START

	mu       sync.Mutex // guards id, stats and hasStats
	id       string
	stats    semaq.FilterStats
	hasStats bool
	lastSeq  atomic.Uint64
}

// FilterWarnings returns what the broker warned about when the filter
// started, such as a payload field the JSON schema bound to the subject
// does not declare (a misspelled field matches nothing). Nil for a
// subscription without a filter.
func (s *Subscription) FilterWarnings() []string {
	if f, ok := s.src.(*filterSource); ok {
		return append([]string(nil), f.warnings...)
	}
	return nil
}

// FilterStats returns the filter's counters as the broker last reported
// them: on each heartbeat ping and, final, when Close stops the filter.
// MissingField counts messages that lacked a field the filter reads. ok is
// false for a subscription without a filter and before the first report.
// Safe for concurrent use.
func (s *Subscription) FilterStats() (st semaq.FilterStats, ok bool) {
	f, isFilter := s.src.(*filterSource)
	if !isFilter {
		return st, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, f.hasStats
}

func (f *filterSource) setStats(st semaq.FilterStats) {
	f.mu.Lock()
	f.stats, f.hasStats = st, true
	f.mu.Unlock()
}

func (c *Client) subscribeFiltered(ctx context.Context, subject string, o subscribeOptions) (*Subscription, error) {
	inbox := c.nc.NewInbox()
	req := semaq.FilterStartRequest{
		Subject: subject, Filter: o.filter, Durable: o.durable, StartSeq: o.startSeq,
		DeliverSubject: inbox, MaxAckPending: 1000, AckWait: o.ackWait,
	}
	if o.deliver == DeliverNew {
		req.Deliver = "new"
	}
	if o.maxAckPending > 0 {
		req.MaxAckPending = o.maxAckPending
	}
	if o.max > 0 {
		req.MaxAckPending = min(o.max, req.MaxAckPending)
	}
	// Room for every unacked match plus redeliveries: JetStream bounds the
	// matches in flight by MaxAckPending.
	ch := make(chan *nats.Msg, 2*req.MaxAckPending+64)
	sub, err := c.nc.ChanSubscribe(inbox+".>", ch)
	if err != nil {
		return nil, fmt.Errorf("client: filtered subscribe: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := c.nc.FlushWithContext(ctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("client: filtered subscribe: %w", err)
	}
	var resp semaq.FilterStartResponse
	if err := c.request(ctx, semaq.APIFilterStart, req, &resp); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	// Restarts resume this consumer with this filter.
	req.Filter = resp.Filter
	f := &filterSource{c: c, req: req, inbox: inbox, sub: sub, ch: ch, id: resp.ID, warnings: resp.Warnings,
		stopHB: make(chan struct{}), hbDone: make(chan struct{})}
	hb := resp.Heartbeat
	if hb <= 0 {
		hb = 2 * time.Second
	}
	go f.heartbeat(hb)
	return &Subscription{c: c, stream: resp.Stream, subject: subject, name: resp.Consumer,
		durable: o.durable != "", opts: o, done: make(chan struct{}), src: f}, nil
}

func (f *filterSource) next(ctx context.Context, done <-chan struct{}) (jetstream.Msg, error) {
	select {
	case m := <-f.ch:
		m.Reply = m.Header.Get(semaq.HdrFilterAck)
		m.Header.Del(semaq.HdrFilterAck)
		fm := &filteredMsg{m: m, nc: f.c.nc, subject: strings.TrimPrefix(m.Subject, f.inbox+".")}
		if md, err := m.Metadata(); err == nil {
			f.lastSeq.Store(md.Sequence.Stream)
		}
		return fm, nil
	case <-done:
		return nil, ErrSubscriptionDone
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *filterSource) heartbeat(every time.Duration) {
	defer close(f.hbDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.stopHB:
			return
		case <-t.C:
		}
		if f.c.nc.IsClosed() {
			return // the broker ends the filter when the pings stop
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		f.mu.Lock()
		id := f.id
		f.mu.Unlock()
		var st semaq.FilterStats
		err := f.c.request(ctx, fmt.Sprintf(semaq.APIFilterPingT, id), nil, &st)
		if err == nil {
			f.setStats(st)
		}
		// No responder: the broker restarted and lost the filter. Gone: the
		// broker ended it; a durable's was taken over by a newer subscriber
		// and stays with it.
		if errors.Is(err, semaq.ErrUnavailable) || errors.Is(err, semaq.ErrFilterGone) && f.req.Durable == "" {
			f.restart(ctx)
		}
		cancel()
	}
}

// restart starts the filter again after the broker lost it.
func (f *filterSource) restart(ctx context.Context) {
	req := f.req
	if req.Durable == "" {
		if seq := f.lastSeq.Load(); seq > 0 {
			req.StartSeq, req.Deliver = seq+1, ""
		}
	}
	var resp semaq.FilterStartResponse
	if err := f.c.request(ctx, semaq.APIFilterStart, req, &resp); err != nil {
		return // next ping tries again
	}
	f.mu.Lock()
	f.id = resp.ID
	f.mu.Unlock()
}

func (f *filterSource) close() error {
	close(f.stopHB)
	<-f.hbDone
	_ = f.sub.Unsubscribe()
	if f.c.nc.IsClosed() {
		return nil
	}
	f.mu.Lock()
	id := f.id
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), f.c.timeout)
	defer cancel()
	var st semaq.FilterStats
	err := f.c.request(ctx, fmt.Sprintf(semaq.APIFilterStopT, id), nil, &st)
	if err == nil {
		f.setStats(st)
	}
	// Matches received but never returned by Next go back at once.
	for {
		select {
		case m := <-f.ch:
			if ack := m.Header.Get(semaq.HdrFilterAck); ack != "" {
				_ = f.c.nc.Publish(ack, []byte("-NAK"))
			}
		default:
			_ = f.c.nc.FlushWithContext(ctx) // the naks, before a Close of the connection drops them
			if err != nil && !errors.Is(err, semaq.ErrFilterGone) {
				return fmt.Errorf("client: stopping filter: %w", err)
			}
			return nil
		}
	}
}

// filteredMsg is a match forwarded by the broker. Its reply subject is set
// to the JetStream ack subject the broker sent in HdrFilterAck, so acks go
// straight to JetStream and Metadata parses it.
type filteredMsg struct {
	m       *nats.Msg
	nc      *nats.Conn
	subject string
}

var _ jetstream.Msg = (*filteredMsg)(nil)

func (fm *filteredMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := fm.m.Metadata()
	if err != nil {
		return nil, err
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered, NumPending: md.NumPending, Timestamp: md.Timestamp,
		Stream: md.Stream, Consumer: md.Consumer, Domain: md.Domain,
	}, nil
}

func (fm *filteredMsg) Data() []byte         { return fm.m.Data }
func (fm *filteredMsg) Headers() nats.Header { return fm.m.Header }
func (fm *filteredMsg) Subject() string      { return fm.subject }
func (fm *filteredMsg) Reply() string        { return fm.m.Reply }
func (fm *filteredMsg) Ack() error           { return fm.ack("+ACK") }
func (fm *filteredMsg) Nak() error           { return fm.ack("-NAK") }
func (fm *filteredMsg) InProgress() error    { return fm.ack("+WPI") }
func (fm *filteredMsg) Term() error          { return fm.ack("+TERM") }
func (fm *filteredMsg) TermWithReason(r string) error {
	return fm.ack("+TERM " + r)
}

func (fm *filteredMsg) NakWithDelay(d time.Duration) error {
	return fm.ack(fmt.Sprintf(`-NAK {"delay": %d}`, d.Nanoseconds()))
}

func (fm *filteredMsg) DoubleAck(ctx context.Context) error {
	if fm.m.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	if _, err := fm.nc.RequestWithContext(ctx, fm.m.Reply, []byte("+ACK")); err != nil {
		return fmt.Errorf("client: ack: %w", err)
	}
	return nil
}

func (fm *filteredMsg) ack(body string) error {
	if fm.m.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	return fm.nc.Publish(fm.m.Reply, []byte(body))
}
