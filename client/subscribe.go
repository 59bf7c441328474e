package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/semaq"
)

// DeliverPolicy says where a new subscription starts.
type DeliverPolicy int

const (
	// DeliverAll starts at the first stored message (the default).
	DeliverAll DeliverPolicy = iota
	// DeliverNew starts with the next message published.
	DeliverNew
)

type subscribeOptions struct {
	durable  string
	deliver  DeliverPolicy
	startSeq uint64
	prefetch int
	max      int
	ackWait  time.Duration
	filter   string // server-side filter (filter.go)
	plugin   string // a filter-stage plugin judging the filter's matches
	key      string // key-shared group key (keyshared.go)
	member   string // key-shared member name
	// maxAckPending of a key-shared group or a filtered subscription
	maxAckPending int
}

// SubscribeOption configures Subscribe.
type SubscribeOption func(*subscribeOptions) error

// WithDurable makes the subscription durable under name: the broker keeps
// its position, and a later Subscribe with the same name resumes after the
// last acknowledged message. Without it the subscription is ephemeral and
// forgotten when closed.
func WithDurable(name string) SubscribeOption {
	return func(o *subscribeOptions) error {
		if err := semaq.CheckConsumerName(name); err != nil {
			return fmt.Errorf("client: WithDurable: %w", err)
		}
		o.durable = name
		return nil
	}
}

// WithDeliver chooses where a new subscription starts. It has no effect on
// a durable subscription that already exists.
func WithDeliver(p DeliverPolicy) SubscribeOption {
	return func(o *subscribeOptions) error {
		if p != DeliverAll && p != DeliverNew {
			return fmt.Errorf("client: WithDeliver: unknown policy %d", p)
		}
		o.deliver = p
		return nil
	}
}

// WithStartSequence starts a new subscription at stream sequence seq.
func WithStartSequence(seq uint64) SubscribeOption {
	return func(o *subscribeOptions) error {
		if seq == 0 {
			return errors.New("client: WithStartSequence: sequences start at 1")
		}
		o.startSeq = seq
		return nil
	}
}

// WithPrefetch sets how many messages one pull asks for (default 128).
// Messages fetched but not yet returned by Next are handed back to the broker
// when the subscription closes.
func WithPrefetch(n int) SubscribeOption {
	return func(o *subscribeOptions) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("client: WithPrefetch: %d is outside 1..10000", n)
		}
		o.prefetch = n
		return nil
	}
}

// WithMaxMessages ends the subscription after n messages: Next returns
// ErrSubscriptionDone, and no more than n are ever pulled from the broker.
func WithMaxMessages(n int) SubscribeOption {
	return func(o *subscribeOptions) error {
		if n < 1 {
			return fmt.Errorf("client: WithMaxMessages: %d is not positive", n)
		}
		o.max = n
		return nil
	}
}

// WithAckWait sets how long the broker waits for an ack before it
// redelivers a message (default 30s).
func WithAckWait(d time.Duration) SubscribeOption {
	return func(o *subscribeOptions) error {
		if d < time.Second {
			return fmt.Errorf("client: WithAckWait: %s is under one second", d)
		}
		o.ackWait = d
		return nil
	}
}

// Subscription receives the messages stored on a subject, in stream order.
// Next must be called from one goroutine at a time; Close may be called from
// any goroutine and makes a blocked Next return.
type Subscription struct {
	c       *Client
	stream  string
	subject string
	cons    jetstream.Consumer
	name    string
	durable bool
	opts    subscribeOptions

	done      chan struct{}
	closeOnce sync.Once

	mu        sync.Mutex // held by Next; guards pull and delivered
	pull      *jsutil.Puller
	delivered int

	src msgSource // set for a filtered subscription: replaces cons
}

// Subscribe starts receiving the messages stored on subject (wildcards
// allowed within one stream). It fails with semaq.ErrNoStream when no stream
// captures subject.
func (c *Client) Subscribe(ctx context.Context, subject string, opts ...SubscribeOption) (*Subscription, error) {
	o := subscribeOptions{prefetch: 128, ackWait: 30 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	if o.key != "" || o.member != "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: KeyBy and WithMember are options of SubscribeKeyShared")
	}
	if o.plugin != "" && o.filter == "" {
		// The plugin alone judges: every message goes to it.
		o.filter = "true"
	}
	if o.maxAckPending > 0 && o.filter == "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: WithMaxAckPending applies to filtered and key-shared subscriptions")
	}
	stream, err := c.StreamBySubject(ctx, subject)
	if err != nil {
		return nil, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	if o.filter != "" {
		return c.subscribeFiltered(ctx, subject, o)
	}

	s := &Subscription{c: c, stream: stream, subject: subject, opts: o, done: make(chan struct{}), durable: o.durable != ""}
	if s.durable {
		cons, err := c.js.Consumer(ctx, stream, o.durable)
		switch {
		case err == nil:
			if f := cons.CachedInfo().Config.FilterSubject; f != subject {
				return nil, semaq.NewAPIError(semaq.ErrBadRequest, "durable %s follows subject %s, not %s", o.durable, f, subject)
			}
			if f := cons.CachedInfo().Config.Metadata[semaq.MetadataFilter]; f != "" {
				o.filter = f // a filtered durable resumes with its filter
				return c.subscribeFiltered(ctx, subject, o)
			}
			s.cons, s.name, s.pull = cons, o.durable, jsutil.NewPuller(cons)
			return s, nil
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return nil, fmt.Errorf("client: looking up durable %s: %w", o.durable, err)
		}
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       o.durable,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       o.ackWait,
		MaxAckPending: 10000,
	}
	if !s.durable {
		cfg.InactiveThreshold = 5 * time.Minute
	}
	switch {
	case o.startSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, o.startSeq
	case o.deliver == DeliverNew:
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	cons, err := c.js.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("client: subscribing to %s on stream %s: %w", subject, stream, err)
	}
	s.cons, s.name, s.pull = cons, cons.CachedInfo().Name, jsutil.NewPuller(cons)
	return s, nil
}

// Stream is the stream the subscription reads.
func (s *Subscription) Stream() string { return s.stream }

// Next returns the next message, waiting until one arrives, ctx is done or
// the subscription ends (ErrSubscriptionDone).
func (s *Subscription) Next(ctx context.Context) (*Msg, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.opts.max > 0 && s.delivered >= s.opts.max {
		return nil, ErrSubscriptionDone
	}
	select {
	case <-s.done:
		return nil, ErrSubscriptionDone
	case <-ctx.Done():
		return nil, ctx.Err()
	default:
	}
	var jm jetstream.Msg
	var err error
	if s.src != nil {
		if jm, err = s.src.next(ctx, s.done); err != nil {
			return nil, err
		}
	} else {
		n := s.opts.prefetch
		if s.opts.max > 0 && s.opts.max-s.delivered < n {
			n = s.opts.max - s.delivered
		}
		jm, err = s.pull.Next(ctx, s.done, n, jetstream.FetchMaxWait(fetchWait))
		switch {
		case errors.Is(err, jsutil.ErrPullStopped):
			return nil, ErrSubscriptionDone
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("client: fetching from %s: %w", s.stream, err)
		}
	}
	s.delivered++
	return newMsg(s.c, jm)
}

// fetchWait is how long one pull request waits at the broker for messages.
// A pull request cannot be withdrawn, so Close waits up to this long for an
// open one to end, handing back what it still delivers; short keeps Close
// quick, long saves idle round trips.
const fetchWait = time.Second

// Close ends the subscription. Messages fetched but not yet returned by Next
// are handed back for immediate redelivery; an ephemeral subscription's
// consumer is deleted, a durable one keeps its position.
func (s *Subscription) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.src != nil {
			err = s.src.close()
			return
		}
		// Hand back everything the open pull request delivers, so a
		// durable's next subscriber gets it at once instead of after the
		// ack wait.
		s.pull.Drain(2*fetchWait, func(jm jetstream.Msg) { _ = jm.Nak() })
		if !s.durable && !s.c.nc.IsClosed() {
			ctx, cancel := context.WithTimeout(context.Background(), s.c.timeout)
			defer cancel()
			if e := s.c.js.DeleteConsumer(ctx, s.stream, s.name); e != nil && !errors.Is(e, jetstream.ErrConsumerNotFound) {
				err = fmt.Errorf("client: deleting consumer %s: %w", s.name, e)
			}
		}
	})
	return err
}

// Msg is a message received from a subscription.
type Msg struct {
	Subject      string
	Stream       string
	Seq          uint64
	Time         time.Time // when the stream stored it
	NumDelivered uint64    // 1 on first delivery
	Header       nats.Header
	Data         []byte

	c  *Client
	jm jetstream.Msg
}

func newMsg(c *Client, jm jetstream.Msg) (*Msg, error) {
	md, err := jm.Metadata()
	if err != nil {
		return nil, fmt.Errorf("client: message without JetStream metadata: %w", err)
	}
	return &Msg{
		Subject: jm.Subject(), Stream: md.Stream, Seq: md.Sequence.Stream, Time: md.Timestamp,
		NumDelivered: md.NumDelivered, Header: jm.Headers(), Data: jm.Data(), c: c, jm: jm,
	}, nil
}

// Envelope parses the message's semantic envelope.
func (m *Msg) Envelope() (semaq.Envelope, error) {
	return semaq.Parse(m.Header, m.Time)
}

// Ack acknowledges the message and waits for the broker to confirm, so a
// message acked before a crash is not delivered again.
func (m *Msg) Ack(ctx context.Context) error {
	ctx, cancel := m.c.withTimeout(ctx)
	defer cancel()
	return m.jm.DoubleAck(ctx)
}

// Nak asks for redelivery after delay (0: at once).
func (m *Msg) Nak(delay time.Duration) error {
	if delay > 0 {
		return m.jm.NakWithDelay(delay)
	}
	return m.jm.Nak()
}

// InProgress tells the broker the message is still being worked on, which
// restarts its ack wait.
func (m *Msg) InProgress() error { return m.jm.InProgress() }

// Term tells the broker never to redeliver the message.
func (m *Msg) Term(reason string) error {
	if reason == "" {
		return m.jm.Term()
	}
	return m.jm.TermWithReason(reason)
}

// msgJSON is the JSON form of a message, shared by `semaq sub --json` and
// the HTTP subscribe stream.
type msgJSON struct {
	Subject string            `json:"subject"`
	Stream  string            `json:"stream"`
	Seq     uint64            `json:"seq"`
	Time    time.Time         `json:"time"`
	Headers map[string]string `json:"headers,omitempty"`
	Data    *string           `json:"data,omitempty"`
	DataB64 []byte            `json:"data_b64,omitempty"`
}

// MarshalJSON renders the message as one JSON object: subject, stream, seq,
// time, headers (name to first value), and data as UTF-8 text, or data_b64
// (base64) when the payload is not valid UTF-8.
func (m *Msg) MarshalJSON() ([]byte, error) {
	out := msgJSON{Subject: m.Subject, Stream: m.Stream, Seq: m.Seq, Time: m.Time}
	if len(m.Header) > 0 {
		out.Headers = make(map[string]string, len(m.Header))
		for k, v := range m.Header {
			if len(v) > 0 {
				out.Headers[k] = v[0]
			}
		}
	}
	if utf8.Valid(m.Data) {
		s := string(m.Data)
		out.Data = &s
	} else {
		out.DataB64 = m.Data
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // payloads are data, not HTML
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
