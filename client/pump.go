package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

// msgSource feeds a Subscription from something other than its own pull
// consumer. next blocks until a message arrives, ctx is done or done is
// closed (then it returns ErrSubscriptionDone); it is called by one
// goroutine at a time. close is called once, after done is closed.
type msgSource interface {
	next(ctx context.Context, done <-chan struct{}) (jetstream.Msg, error)
	close() error
}

// exprOption is an option that sets the expression a broker pump
// evaluates (WithFilter, KeyBy); an empty one is refused.
func exprOption(option, what, expr string, set func(*subscribeOptions)) SubscribeOption {
	return func(o *subscribeOptions) error {
		if strings.TrimSpace(expr) == "" {
			return fmt.Errorf("client: %s: %s is empty", option, what)
		}
		set(o)
		return nil
	}
}

// pumpDeliver is the deliver policy of a pump request: "new", or "" for
// all.
func (o *subscribeOptions) pumpDeliver() string {
	if o.deliver == DeliverNew {
		return "new"
	}
	return ""
}

// pumpAckPending is the max_ack_pending of a pump request (default 1000).
func (o *subscribeOptions) pumpAckPending() int {
	if o.maxAckPending > 0 {
		return o.maxAckPending
	}
	return 1000
}

// lease is the client's side of what a broker pump runs for it: a
// filtered subscription (filter.go) or a key-shared membership
// (keyshared.go). Its methods are called by one goroutine at a time: start
// by subscribePump and then the heartbeat, end by close after the
// heartbeat stopped.
type lease interface {
	// start asks the broker to start the pump, forwarding to inbox, or to
	// start it again after it lost it.
	start(ctx context.Context, inbox string) (pumpStarted, error)
	// ping renews id at the broker.
	ping(ctx context.Context, id string) error
	// lost reports whether a ping's error means the broker no longer runs
	// it, so it is to be started again.
	lost(err error) bool
	// end stops id at the broker (STOP, LEAVE) and says why it could not.
	end(ctx context.Context, id string) error
	// received sees each message before next returns it.
	received(m *nats.Msg)
}

// pumpStarted is the broker's answer to a start.
type pumpStarted struct {
	id, stream, consumer string
	heartbeat            time.Duration
}

// pumpSource is the client end of a broker pump: it receives what the
// broker forwards to an inbox and keeps the pump alive with pings, on one
// heartbeat goroutine from subscribePump to close.
type pumpSource struct {
	c      *Client
	l      lease
	inbox  string
	sub    *nats.Subscription
	ch     chan *nats.Msg
	stopHB chan struct{}
	hbDone chan struct{}

	mu sync.Mutex // guards id
	id string
}

// subscribePump subscribes an inbox, starts the broker's pump there and
// keeps it alive. maxAckPending sizes the inbox: JetStream bounds what is
// in flight by it, redeliveries aside.
func (c *Client) subscribePump(ctx context.Context, what, subject string, o subscribeOptions, durable bool, l lease, maxAckPending int) (*Subscription, error) {
	p := &pumpSource{c: c, l: l, inbox: c.nc.NewInbox(), ch: make(chan *nats.Msg, 2*maxAckPending+64),
		stopHB: make(chan struct{}), hbDone: make(chan struct{})}
	var err error
	if p.sub, err = c.nc.ChanSubscribe(p.inbox+".>", p.ch); err != nil {
		return nil, fmt.Errorf("client: %s: %w", what, err)
	}
	_ = p.sub.SetPendingLimits(-1, -1)
	if err := c.nc.FlushWithContext(ctx); err != nil {
		_ = p.sub.Unsubscribe()
		return nil, fmt.Errorf("client: %s: %w", what, err)
	}
	st, err := l.start(ctx, p.inbox)
	if err != nil {
		_ = p.sub.Unsubscribe()
		return nil, err
	}
	p.id = st.id
	hb := st.heartbeat
	if hb <= 0 {
		hb = 2 * time.Second
	}
	go p.heartbeat(hb)
	return &Subscription{c: c, stream: st.stream, subject: subject, name: st.consumer,
		durable: durable, opts: o, done: make(chan struct{}), src: p}, nil
}

func (p *pumpSource) next(ctx context.Context, done <-chan struct{}) (jetstream.Msg, error) {
	select {
	case m := <-p.ch:
		m.Reply = m.Header.Get(semaq.HdrFilterAck)
		m.Header.Del(semaq.HdrFilterAck)
		p.l.received(m)
		return &filteredMsg{m: m, nc: p.c.nc, subject: strings.TrimPrefix(m.Subject, p.inbox+".")}, nil
	case <-done:
		return nil, ErrSubscriptionDone
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pumpSource) heartbeat(every time.Duration) {
	defer close(p.hbDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stopHB:
			return
		case <-t.C:
		}
		if p.c.nc.IsClosed() {
			return // the broker ends the pump when the pings stop
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		if err := p.l.ping(ctx, p.currentID()); p.l.lost(err) {
			// The next ping tries again if this fails.
			if st, err := p.l.start(ctx, p.inbox); err == nil {
				p.mu.Lock()
				p.id = st.id
				p.mu.Unlock()
			}
		}
		cancel()
	}
}

func (p *pumpSource) currentID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id
}

// close stops the heartbeat and the pump, then hands back at once what was
// received but never returned by next.
func (p *pumpSource) close() error {
	close(p.stopHB)
	<-p.hbDone
	_ = p.sub.Unsubscribe()
	if !p.c.nc.IsConnected() {
		// Closed, or reconnecting (a revoked key's connection, which the
		// broker closed): no end request could go out, and the broker ends
		// the pump when the heartbeats stop.
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.c.timeout)
	defer cancel()
	// End first, so what is handed back below goes to the others.
	err := p.l.end(ctx, p.currentID())
	for {
		select {
		case m := <-p.ch:
			if ack := m.Header.Get(semaq.HdrFilterAck); ack != "" {
				_ = p.c.nc.Publish(ack, []byte("-NAK"))
			}
		default:
			_ = p.c.nc.FlushWithContext(ctx) // the naks, before a Close of the connection drops them
			return err
		}
	}
}

// filteredMsg is a message forwarded by a broker pump. Its reply subject is
// set to the JetStream ack subject the broker sent in HdrFilterAck, so acks
// go straight to JetStream and Metadata parses it.
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
