package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/semaq/semaq/internal/bench"
)

// DefaultRabbitMQURL is where the RabbitMQ targets look for a server.
const DefaultRabbitMQURL = "amqp://guest:guest@127.0.0.1:5672/"

// rabbitDialTimeout bounds the connection attempt that decides whether the
// target is reachable at all.
const rabbitDialTimeout = 3 * time.Second

// ErrUnreachable means a target's server could not be reached; the report
// says so and why instead of measuring it.
var ErrUnreachable = errors.New("unreachable")

// rabbitStartHint says how to get a RabbitMQ server for target.
func rabbitStartHint(target string) string {
	return "start one (docker run -d -p 5672:5672 rabbitmq:3) or point --rabbitmq-url at one, or leave " + target + " out of --targets"
}

// unreachableError is a target's server that did not answer. It matches
// ErrUnreachable; its text starts with "unreachable: " once and says
// which URL was tried and how to get a server there.
type unreachableError struct {
	url  string // redacted
	hint string
	err  error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("unreachable: no server answered at %s (%v); %s", e.url, e.err, e.hint)
}

func (e *unreachableError) Unwrap() []error { return []error{ErrUnreachable, e.err} }

// rabbitSystem is RabbitMQ over AMQP 0.9.1: one durable queue per stage on
// the default exchange, classic or quorum, publishers in confirm mode (an
// ack is the broker's confirm), workers with manual acks and a prefetch of
// the scenario's window. A durable scenario publishes persistent messages;
// otherwise transient ones. RabbitMQ confirms a persistent message in a
// classic queue once it is on disk or once every queue it went to has had
// it consumed and acked, whichever comes first: in a closed loop with
// workers that keep up, part of the messages are confirmed without having
// been written at all (docs/benchmarks/scenarios.md), where SemaQ's and
// JetStream's acks always follow the fsync. A quorum queue appends every
// message to its log, persistent or not, and confirms it once the log is
// fsynced: the peer of a durable scenario. Quorum queues cannot be
// exclusive, so the reply queues of request-reply stay classic, exclusive
// and transient on either target, as NATS replies are not stored.
// Every producer, worker and inbox has a connection of its own, as NATS
// clients do.
type rabbitSystem struct {
	url    string
	quorum bool // stage queues are quorum queues
	sc     *Scenario

	mu    sync.Mutex
	conns []*amqp.Connection
	// queues are the names of the stage queues, deleted on close.
	queues []string
	prefix string
}

// newRabbitSystem makes the system of the rabbitmq target (classic stage
// queues) or, with quorum, of rabbitmq-quorum, and dials url once to find
// out whether a server is there.
func newRabbitSystem(rawURL string, quorum bool) (*rabbitSystem, error) {
	s := newRabbitSystemAt(rawURL, quorum)
	conn, err := s.dial("probe")
	if err != nil {
		return nil, err
	}
	_ = conn.Close()
	return s, nil
}

// rabbitPrefixSeq tells apart the queue prefixes of systems made in the
// same nanosecond.
var rabbitPrefixSeq atomic.Int64

// newRabbitSystemAt is the system without the probe. Its queue names carry
// the target, the time and a sequence number, so the two targets, and
// rounds or runs sharing a server, never declare the same queue: a queue
// redeclared with another type fails.
func newRabbitSystemAt(rawURL string, quorum bool) *rabbitSystem {
	kind := "classic"
	if quorum {
		kind = "quorum"
	}
	return &rabbitSystem{url: rawURL, quorum: quorum, prefix: fmt.Sprintf("semaq-bench-%s-%s-%d",
		kind, strconv.FormatInt(time.Now().UnixNano(), 36), rabbitPrefixSeq.Add(1))}
}

func (s *rabbitSystem) target() string {
	if s.quorum {
		return TargetRabbitMQQuorum
	}
	return TargetRabbitMQ
}

// errorf is an error of this target, named by it.
func (s *rabbitSystem) errorf(format string, args ...any) error {
	return fmt.Errorf("bench: "+s.target()+": "+format, args...)
}

func (s *rabbitSystem) dial(name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("semaq-bench-" + s.target() + "-" + name)
	conn, err := amqp.DialConfig(s.url, amqp.Config{
		Dial:       amqp.DefaultDial(rabbitDialTimeout),
		Properties: props,
		Heartbeat:  10 * time.Second,
	})
	if err != nil {
		return nil, &unreachableError{url: redactURL(s.url), hint: rabbitStartHint(s.target()), err: err}
	}
	s.mu.Lock()
	s.conns = append(s.conns, conn)
	s.mu.Unlock()
	return conn, nil
}

// redactURL drops the password from an AMQP URL before it goes in a report.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func (s *rabbitSystem) queue(stage int) string { return s.prefix + ".s" + strconv.Itoa(stage) }

// queueDecl is the arguments of a queue.declare.
type queueDecl struct {
	name                           string
	durable, autoDelete, exclusive bool
	args                           amqp.Table
}

// stageQueue is how stage's queue is declared: durable, neither exclusive
// nor auto-deleted (close deletes it), and for rabbitmq-quorum a quorum
// queue, which RabbitMQ refuses to make non-durable, exclusive or
// auto-deleted.
func (s *rabbitSystem) stageQueue(stage int) queueDecl {
	d := queueDecl{name: s.queue(stage), durable: true}
	if s.quorum {
		d.args = amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}
	}
	return d
}

func (s *rabbitSystem) setup(ctx context.Context, sc *Scenario) error {
	s.sc = sc
	conn, err := s.dial("admin")
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return s.errorf("channel: %w", err)
	}
	defer ch.Close()
	for stage := range sc.Hops {
		d := s.stageQueue(stage)
		q := d.name
		if _, err := ch.QueueDeclare(q, d.durable, d.autoDelete, d.exclusive, false, d.args); err != nil {
			return fmt.Errorf("bench: %s: declaring queue %s: %w", s.target(), q, err)
		}
		s.mu.Lock()
		s.queues = append(s.queues, q)
		s.mu.Unlock()
		if _, err := ch.QueuePurge(q, false); err != nil {
			return s.errorf("purging queue %s: %w", q, err)
		}
	}
	return ctx.Err()
}

func (s *rabbitSystem) deliveryMode() uint8 {
	if s.sc != nil && s.sc.Durable {
		return amqp.Persistent
	}
	return amqp.Transient
}

func table(m *outMsg) amqp.Table {
	t := make(amqp.Table, len(m.hdr)/2+1)
	for i := 0; i < len(m.hdr); i += 2 {
		t[m.hdr[i]] = m.hdr[i+1]
	}
	return t
}

func tableGet(t amqp.Table) func(string) string {
	return func(k string) string {
		if v, ok := t[k].(string); ok {
			return v
		}
		return ""
	}
}

// errNacked is a publish the broker refused (basic.nack).
var errNacked = errors.New("rabbitmq: publish nacked by the broker")

func (s *rabbitSystem) producer(_ context.Context, name string, stage, window int, done func(time.Time, error)) (producer, error) {
	conn, err := s.dial(name)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, s.errorf("channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, s.errorf("confirm mode: %w", err)
	}
	p := &rabbitProducer{
		target: s.target(), ch: ch, queue: s.queue(stage), mode: s.deliveryMode(), done: done,
		slots: make(chan struct{}, window), confirms: ch.NotifyPublish(make(chan amqp.Confirmation, window)),
		idle: make(chan struct{}),
	}
	go p.confirmLoop()
	return p, nil
}

// rabbitProducer publishes in confirm mode with at most cap(slots)
// unconfirmed messages. Confirms come in publish order, so the publish
// times wait in a FIFO.
type rabbitProducer struct {
	target   string // rabbitmq or rabbitmq-quorum, for errors
	ch       *amqp.Channel
	queue    string
	mode     uint8
	done     func(time.Time, error)
	slots    chan struct{}
	confirms chan amqp.Confirmation

	mu      sync.Mutex
	pending []time.Time
	idle    chan struct{} // closed when pending empties; replaced on the next publish
}

func (p *rabbitProducer) confirmLoop() {
	for c := range p.confirms {
		p.mu.Lock()
		if len(p.pending) == 0 {
			p.mu.Unlock()
			continue
		}
		at := p.pending[0]
		p.pending = p.pending[1:]
		if len(p.pending) == 0 {
			close(p.idle)
		}
		p.mu.Unlock()
		<-p.slots
		var err error
		if !c.Ack {
			err = errNacked
		}
		p.done(at, err)
	}
}

func (p *rabbitProducer) publish(ctx context.Context, m *outMsg) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	now := time.Now()
	m.set(hdrPub, strconv.FormatInt(now.UnixNano(), 10))
	p.mu.Lock()
	if len(p.pending) == 0 {
		p.idle = make(chan struct{})
	}
	p.pending = append(p.pending, now)
	// Under the lock so the FIFO stays in publish order.
	err := p.ch.PublishWithContext(ctx, "", p.queue, false, false, amqp.Publishing{
		Headers: table(m), Body: m.data, DeliveryMode: p.mode,
	})
	if err != nil {
		p.pending = p.pending[:len(p.pending)-1]
		if len(p.pending) == 0 {
			close(p.idle)
		}
	}
	p.mu.Unlock()
	if err != nil {
		<-p.slots
		p.done(now, err)
	}
	return err
}

func (p *rabbitProducer) flush(ctx context.Context) error {
	p.mu.Lock()
	idle, n := p.idle, len(p.pending)
	p.mu.Unlock()
	if n == 0 {
		return nil
	}
	timer := time.NewTimer(bench.DrainTimeout)
	defer timer.Stop()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("bench: %s: %d messages still unconfirmed %s after publishing stopped", p.target, n, bench.DrainTimeout)
	}
}

func (p *rabbitProducer) close() { _ = p.ch.Close() }

func (s *rabbitSystem) consume(_ context.Context, stage int, name string, prefetch int, h func(*inMsg)) (func(), error) {
	conn, err := s.dial(name)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, s.errorf("channel: %w", err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, s.errorf("prefetch: %w", err)
	}
	tag := "semaq-bench-" + name
	deliveries, err := ch.Consume(s.queue(stage), tag, false, false, false, false, nil)
	if err != nil {
		return nil, s.errorf("consuming %s: %w", s.queue(stage), err)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for d := range deliveries {
			h(&inMsg{get: tableGet(d.Headers), data: d.Body, redelivered: d.Redelivered, ack: func() { _ = d.Ack(false) }})
		}
	}()
	return func() {
		_ = ch.Cancel(tag, false)
		_ = ch.Close()
		<-finished
	}, nil
}

func (s *rabbitSystem) inbox(_ context.Context, name string, h func(*inMsg)) (string, func(), error) {
	conn, err := s.dial(name)
	if err != nil {
		return "", nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return "", nil, s.errorf("channel: %w", err)
	}
	// Server-named, exclusive, gone with the connection: a reply queue.
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		return "", nil, s.errorf("reply queue: %w", err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return "", nil, s.errorf("consuming %s: %w", q.Name, err)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for d := range deliveries {
			h(&inMsg{get: tableGet(d.Headers), data: d.Body, ack: func() {}})
		}
	}()
	return q.Name, func() { _ = ch.Close(); <-finished }, nil
}

func (s *rabbitSystem) replier(_ context.Context, name string) (replier, error) {
	conn, err := s.dial(name)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, s.errorf("channel: %w", err)
	}
	return &rabbitReplier{ch: ch}, nil
}

type rabbitReplier struct{ ch *amqp.Channel }

func (r *rabbitReplier) reply(addr string, m *outMsg) error {
	return r.ch.Publish("", addr, false, false, amqp.Publishing{Headers: table(m), Body: m.data, DeliveryMode: amqp.Transient})
}

func (r *rabbitReplier) close() { _ = r.ch.Close() }

func (s *rabbitSystem) describe() string {
	durable := s.sc != nil && s.sc.Durable
	if s.quorum {
		mode := "every message written and fsynced before its confirm"
		if !durable {
			mode += " (the scenario is not durable: the NATS targets sync on an interval, a quorum queue still fsyncs each write)"
		}
		return fmt.Sprintf("%s at %s, AMQP 0.9.1, quorum queues, publisher confirms, manual acks, %s", TargetRabbitMQQuorum, redactURL(s.url), mode)
	}
	mode := "transient messages (acks: in the queue, written to disk when paged out)"
	if durable {
		mode = "persistent messages (confirmed once on disk, or once consumed and acked if that comes first)"
	}
	return fmt.Sprintf("%s at %s, AMQP 0.9.1, classic durable queues, publisher confirms, manual acks, %s", TargetRabbitMQ, redactURL(s.url), mode)
}

func (s *rabbitSystem) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queues) > 0 && len(s.conns) > 0 {
		if conn, err := amqp.DialConfig(s.url, amqp.Config{Dial: amqp.DefaultDial(rabbitDialTimeout)}); err == nil {
			if ch, err := conn.Channel(); err == nil {
				for _, q := range s.queues {
					_, _ = ch.QueueDelete(q, false, false, false)
				}
			}
			_ = conn.Close()
		}
	}
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.conns = nil
}
