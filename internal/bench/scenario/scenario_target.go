package scenario

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/bench"
)

// Headers a scenario's messages carry besides the envelope. Every target
// carries the same ones, so every target moves the same bytes.
const (
	hdrSent    = "Bench-Sent"    // scheduled time of the first publish, unix ns
	hdrPub     = "Bench-Pub"     // time of this publish call, unix ns
	hdrSession = "Bench-Session" // session key
	hdrSeq     = "Bench-Seq"     // position in the session, from 1
	hdrReply   = "Bench-Reply"   // where a request's answer goes
)

// system is one broker a scenario runs against, seen through the few
// operations a workload needs: publish with acknowledgement, consume with
// manual ack, and a reply path. Producers and repliers are used from one
// goroutine each; the handlers of consume and inbox run on the system's
// delivery goroutines, one at a time per consumer.
type system interface {
	// setup creates the stages' streams or queues, empty.
	setup(ctx context.Context, sc *Scenario) error
	// producer publishes to stage; done is called once per publish with
	// the time of the publish call and the outcome, on any goroutine.
	producer(ctx context.Context, name string, stage int, window int, done func(pubAt time.Time, err error)) (producer, error)
	// consume starts one worker on stage, with at most prefetch
	// unacknowledged deliveries; stop ends it.
	consume(ctx context.Context, stage int, name string, prefetch int, h func(*inMsg)) (stop func(), err error)
	// inbox receives answers; addr is what a request names as Bench-Reply.
	inbox(ctx context.Context, name string, h func(*inMsg)) (addr string, stop func(), err error)
	// replier sends answers to inboxes.
	replier(ctx context.Context, name string) (replier, error)
	// describe says where the target runs and what its acks mean.
	describe() string
	close()
}

// producer publishes to one stage. publish blocks while the window of
// unacknowledged messages is full; flush waits for every ack in flight.
type producer interface {
	publish(ctx context.Context, m *outMsg) error
	flush(ctx context.Context) error
	close()
}

// replier answers a request without storing the answer.
type replier interface {
	reply(addr string, m *outMsg) error
	close()
}

// outMsg is a message to send: headers in the order set, and the payload.
type outMsg struct {
	hdr  []string // name, value, name, value, ...
	data []byte
}

func (m *outMsg) set(k, v string) { m.hdr = append(m.hdr, k, v) }

// inMsg is a delivered message.
type inMsg struct {
	get         func(string) string // header value, "" when absent
	data        []byte
	redelivered bool
	ack         func()
}

// natsSystem is a SemaQ or a raw JetStream target: a JetStream stream on an
// embedded server, published to through the ingress (semaq) or straight
// (jetstream), consumed with pull consumers and explicit acks.
type natsSystem struct {
	t   *bench.Target
	rig *bench.Rig
	sc  *Scenario

	mu    sync.Mutex
	conns []*nats.Conn
}

func newNATSSystem(r *bench.Rig, name string) *natsSystem {
	return &natsSystem{t: bench.Targets[name], rig: r}
}

// stageSubject is where stage i's messages go: a subject of the target's
// stream (bench.semaq.> or benchraw.>).
func (s *natsSystem) stageSubject(stage int) string {
	switch {
	case s.tokens():
		return "benchtok.s" + strconv.Itoa(stage)
	case s.t.Name == bench.TargetJetStream:
		return "benchraw.s" + strconv.Itoa(stage)
	}
	return "bench.semaq.s" + strconv.Itoa(stage)
}

// tokens: the raw baseline of a token scenario, which stores in memory
// like SemaQ's token store (SQ_TOKENS) does.
func (s *natsSystem) tokens() bool {
	return s.t.Name == bench.TargetJetStream && s.sc != nil && s.sc.Pattern == PatternTokens
}

// Raw stream of token scenarios.
const (
	tokensRawStream   = "BENCH_TOKENS_RAW"
	tokensRawSubjects = "benchtok.>"
)

func (s *natsSystem) stream() string {
	switch {
	case s.tokens():
		return tokensRawStream
	case s.t.Stream != "":
		return s.t.Stream
	}
	return bench.JetStreamStream
}

func (s *natsSystem) dial(name string) (*nats.Conn, error) {
	nc, err := s.t.Dial(s.rig, "semaq-bench-"+name)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: connecting: %w", s.t.Name, err)
	}
	s.mu.Lock()
	s.conns = append(s.conns, nc)
	s.mu.Unlock()
	return nc, nil
}

// setup empties the target's stream (the rig made it) and makes one
// durable consumer per stage, shared by the stage's workers.
func (s *natsSystem) setup(ctx context.Context, sc *Scenario) error {
	s.sc = sc
	nc, err := s.rig.RawConn(nats.Name("semaq-bench-admin"))
	if s.t.Name == bench.TargetSemaq {
		nc, err = s.rig.OperatorConn(nats.Name("semaq-bench-admin"))
	}
	if err != nil {
		return fmt.Errorf("bench: %s: admin connection: %w", s.t.Name, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if s.tokens() {
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: tokensRawStream, Subjects: []string{tokensRawSubjects}, Storage: jetstream.MemoryStorage,
			Description: "semaq bench: raw JetStream baseline of token streams",
		}); err != nil {
			return fmt.Errorf("bench: %s: creating stream %s: %w", s.t.Name, tokensRawStream, err)
		}
	}
	st, err := js.Stream(ctx, s.stream())
	if err != nil {
		return fmt.Errorf("bench: %s: stream %s: %w", s.t.Name, s.stream(), err)
	}
	if err := st.Purge(ctx); err != nil {
		return fmt.Errorf("bench: %s: purging %s: %w", s.t.Name, s.stream(), err)
	}
	for stage := range sc.Hops {
		_, err := js.CreateOrUpdateConsumer(ctx, s.stream(), jetstream.ConsumerConfig{
			Durable:       consumerName(stage),
			FilterSubject: s.stageSubject(stage),
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       sc.AckWait,
			DeliverPolicy: jetstream.DeliverNewPolicy,
			MaxAckPending: max(1000, 2*sc.Consumers*sc.Window),
		})
		if err != nil {
			return fmt.Errorf("bench: %s: consumer for stage %d: %w", s.t.Name, stage, err)
		}
	}
	return nil
}

func consumerName(stage int) string { return "bench-stage" + strconv.Itoa(stage) }

func (s *natsSystem) producer(ctx context.Context, name string, stage, window int, done func(time.Time, error)) (producer, error) {
	nc, err := s.dial(name)
	if err != nil {
		return nil, err
	}
	pubTime := func(m *nats.Msg) time.Time {
		ns, _ := strconv.ParseInt(m.Header.Get(hdrPub), 10, 64)
		return time.Unix(0, ns)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(window),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { done(pubTime(m), nil) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) { done(pubTime(m), err) }),
	)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", s.t.Name, err)
	}
	return &natsProducer{nc: nc, js: js, subject: s.stageSubject(stage), done: done}, nil
}

type natsProducer struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	done    func(time.Time, error)
}

func (p *natsProducer) publish(ctx context.Context, om *outMsg) error {
	m := nats.NewMsg(p.subject)
	for i := 0; i < len(om.hdr); i += 2 {
		m.Header.Set(om.hdr[i], om.hdr[i+1])
	}
	m.Data = om.data
	for {
		now := time.Now()
		m.Header.Set(hdrPub, strconv.FormatInt(now.UnixNano(), 10))
		_, err := p.js.PublishMsgAsync(m)
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil {
			continue // the window stayed full for a while; keep waiting
		}
		if err != nil {
			p.done(now, err)
		}
		return err
	}
}

func (p *natsProducer) flush(ctx context.Context) error {
	timer := time.NewTimer(bench.DrainTimeout)
	defer timer.Stop()
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("bench: %d messages still unacknowledged %s after publishing stopped", p.js.PublishAsyncPending(), bench.DrainTimeout)
	}
}

func (p *natsProducer) close() { p.nc.Close() }

func (s *natsSystem) consume(ctx context.Context, stage int, name string, prefetch int, h func(*inMsg)) (func(), error) {
	nc, err := s.dial(name)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cons, err := js.Consumer(ctx, s.stream(), consumerName(stage))
	if err != nil {
		return nil, fmt.Errorf("bench: %s: consumer for stage %d: %w", s.t.Name, stage, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var redelivered bool
		if md, err := m.Metadata(); err == nil {
			redelivered = md.NumDelivered > 1
		}
		hdr := m.Headers()
		h(&inMsg{get: hdr.Get, data: m.Data(), redelivered: redelivered, ack: func() { _ = m.Ack() }})
	}, jetstream.PullMaxMessages(prefetch))
	if err != nil {
		return nil, fmt.Errorf("bench: %s: consuming stage %d: %w", s.t.Name, stage, err)
	}
	return func() { cc.Stop(); <-cc.Closed() }, nil
}

func (s *natsSystem) inbox(_ context.Context, name string, h func(*inMsg)) (string, func(), error) {
	nc, err := s.dial(name)
	if err != nil {
		return "", nil, err
	}
	addr := nc.NewRespInbox()
	sub, err := nc.Subscribe(addr, func(m *nats.Msg) {
		h(&inMsg{get: m.Header.Get, data: m.Data, ack: func() {}})
	})
	if err != nil {
		return "", nil, fmt.Errorf("bench: %s: inbox: %w", s.t.Name, err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	return addr, func() { _ = sub.Unsubscribe() }, nil
}

func (s *natsSystem) replier(_ context.Context, name string) (replier, error) {
	nc, err := s.dial(name)
	if err != nil {
		return nil, err
	}
	return natsReplier{nc}, nil
}

type natsReplier struct{ nc *nats.Conn }

func (r natsReplier) reply(addr string, om *outMsg) error {
	m := nats.NewMsg(addr)
	for i := 0; i < len(om.hdr); i += 2 {
		m.Header.Set(om.hdr[i], om.hdr[i+1])
	}
	m.Data = om.data
	return r.nc.PublishMsg(m)
}

func (r natsReplier) close() {}

func (s *natsSystem) describe() string {
	if s.tokens() {
		return fmt.Sprintf("%s: stream %s in memory (as SemaQ's token store), one message per token", s.t.Name, tokensRawStream)
	}
	setup, err := s.rig.Setup(context.Background(), []string{s.t.Name})
	if err != nil || len(setup) == 0 {
		return s.t.Name
	}
	return setup[0].Describe()
}

func (s *natsSystem) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, nc := range s.conns {
		nc.Close()
	}
	s.conns = nil
}

// openSystem makes the system of target name, or says why it cannot.
func openSystem(r *bench.Rig, name, rabbitURL string) (system, error) {
	switch name {
	case bench.TargetSemaq, bench.TargetJetStream:
		return newNATSSystem(r, name), nil
	case TargetRabbitMQ, TargetRabbitMQQuorum:
		s, err := newRabbitSystem(rabbitURL, name == TargetRabbitMQQuorum)
		if err != nil {
			return nil, err // not a nil *rabbitSystem in a non-nil system
		}
		return s, nil
	}
	return nil, fmt.Errorf("%w: targets: %q is not a target", bench.ErrBadConfig, name)
}
