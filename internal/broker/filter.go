package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// Filtered subscriptions (docs/filtering.md): a pump per subscription pulls
// the stream through a JetStream consumer on the internal connection,
// evaluates the filter, acks what does not match and forwards what matches
// to the client with the JetStream ack subject in a header (NATS refuses a
// client publish whose reply is a $JS.ACK subject). The client's acks go
// straight to JetStream, so redelivery works as for any consumer.

const (
	// filterHeartbeat is how often clients ping their filter; a filter not
	// pinged for filterExpiry heartbeats ends.
	filterHeartbeat     = 2 * time.Second
	filterExpiry        = 3
	filterMaxAckPending = 1000
	// DefaultMaxFilters bounds the filtered subscriptions one node runs
	// (each is a JetStream consumer and a pump goroutine); past it START is
	// refused with ErrOverloaded. Config.MaxFilters overrides it.
	DefaultMaxFilters = 1000
	// MaxFilterAckPending bounds a filtered subscription's max_ack_pending.
	MaxFilterAckPending = 10000
	filterAckWait       = 30 * time.Second
)

// filters holds the pumps of this node. mu guards pumps and closed; it is
// never held while a pump stops (stopping waits for the pump's handler).
type filters struct {
	s     *Server
	env   *expr.Env
	node  string // this node's token in filter ids and PING/STOP subjects
	mu    sync.Mutex
	pumps map[string]*filterPump
	// byDurable maps stream/durable to the pump serving it: a new START for
	// the same durable takes over (the old client is gone or reconnecting).
	byDurable map[string]*filterPump
	seq       uint64
	closed    bool
	stopReap  chan struct{}
	reapDone  chan struct{}
}

// filterPump is one filtered subscription.
type filterPump struct {
	id, stream, consumer string
	durable              bool
	deliver              string // deliver subject prefix
	prog                 *expr.Program
	nc                   *nats.Conn
	cc                   jetstream.ConsumeContext

	lastPing                 atomic.Int64 // unix nanos
	stopping                 atomic.Bool
	matched, skipped, errors atomic.Uint64
	missing                  atomic.Uint64 // errors for a field or header the message lacks
	stopOnce                 sync.Once
	pos                      []*patternObs // delivery latency by stream pattern (observe.go)
}

// filterHandlers serves $SQ.API.FILTER.*. PING and STOP carry the node in the
// filter id, so they reach the node that runs the pump.
func (s *Server) filterHandlers() map[string]nats.MsgHandler {
	env, err := expr.NewEnvConfig(s.cfg.exprConfig())
	if err != nil {
		// The environment is static; this cannot fail at runtime.
		s.log.Error("filters disabled", "err", err)
		return nil
	}
	f := &filters{
		s: s, env: env, node: nuid.Next(),
		pumps: make(map[string]*filterPump), byDurable: make(map[string]*filterPump),
		stopReap: make(chan struct{}), reapDone: make(chan struct{}),
	}
	s.filters = f
	go f.reap()
	return map[string]nats.MsgHandler{
		semaq.APIFilterStart:                           f.apiStart,
		fmt.Sprintf(semaq.APIFilterPingT, f.node+".*"): f.apiPing,
		fmt.Sprintf(semaq.APIFilterStopT, f.node+".*"): f.apiStop,
	}
}

// stopFilters ends every pump; ephemeral consumers are deleted. It runs at
// shutdown, before the internal connection drains.
func (s *Server) stopFilters() {
	f := s.filters
	if f == nil {
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	pumps := make([]*filterPump, 0, len(f.pumps))
	for _, p := range f.pumps {
		pumps = append(pumps, p)
	}
	f.mu.Unlock()
	close(f.stopReap)
	<-f.reapDone
	for _, p := range pumps {
		f.stop(p)
	}
}

func (f *filters) apiStart(m *nats.Msg) {
	var req semaq.FilterStartRequest
	if err := api.Decode(m.Data, &req); err != nil {
		api.ReplyErr(f.s.log, m, semaq.NewAPIError(semaq.ErrBadRequest, "filter start: request is not valid: %v", err))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
	defer cancel()
	resp, err := f.start(ctx, &req)
	if err != nil {
		if ae, ok := errors.AsType[*semaq.APIError](err); ok {
			api.ReplyErr(f.s.log, m, ae)
			return
		}
		api.ReplyErr(f.s.log, m, api.JSError(err, "filter start"))
		return
	}
	api.ReplyJSON(f.s.log, m, resp)
}

func badFilter(format string, args ...any) error {
	return semaq.NewAPIError(semaq.ErrBadRequest, "filter: "+format, args...)
}

func (f *filters) start(ctx context.Context, req *semaq.FilterStartRequest) (*semaq.FilterStartResponse, error) {
	if err := checkSubject(req.Subject, true); err != nil {
		return nil, badFilter("%v", err)
	}
	if err := checkSubject(req.DeliverSubject, false); err != nil {
		return nil, badFilter("deliver_subject: %v", err)
	}
	if err := semaq.CheckReplySubject(req.DeliverSubject); err != nil {
		// The broker publishes there: never into its own namespaces.
		return nil, badFilter("deliver_subject: %v; use an inbox", err)
	}
	if req.Durable != "" {
		if err := semaq.CheckConsumerName(req.Durable); err != nil {
			return nil, badFilter("%v", err)
		}
	}
	if req.MaxAckPending < 0 || req.AckWait < 0 {
		return nil, badFilter("max_ack_pending and ack_wait may not be negative")
	}
	if req.MaxAckPending > MaxFilterAckPending {
		return nil, badFilter("max_ack_pending %d is over %d", req.MaxAckPending, MaxFilterAckPending)
	}
	f.mu.Lock()
	n := len(f.pumps)
	f.mu.Unlock()
	if n >= f.s.cfg.maxFilters() {
		return nil, semaq.NewAPIError(semaq.ErrOverloaded, "filter: this node runs %d filtered subscriptions, the most it allows; stop one or use another node", n)
	}
	stream, err := f.lookup(ctx, req.Subject)
	if err != nil {
		return nil, err
	}

	var cons jetstream.Consumer
	src := req.Filter
	if req.Durable != "" {
		cons, err = f.s.js.Consumer(ctx, stream, req.Durable)
		switch {
		case err == nil:
			cfg := cons.CachedInfo().Config
			have := cfg.Metadata[semaq.MetadataFilter]
			switch {
			case have == "":
				return nil, badFilter("durable %s was created without a filter; use another name", req.Durable)
			case src != "" && src != have:
				return nil, badFilter("durable %s filters on %q, not %q; delete it or use another name", req.Durable, have, src)
			case cfg.FilterSubject != req.Subject:
				return nil, badFilter("durable %s follows subject %s, not %s", req.Durable, cfg.FilterSubject, req.Subject)
			}
			src = have
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return nil, err
		default:
			cons = nil
		}
	}
	if src == "" {
		return nil, badFilter("the filter expression is empty")
	}
	prog, err := f.env.Compile(src)
	if err != nil {
		return nil, badFilter("%v", err)
	}
	var warnings []string
	for _, fp := range f.checkFields(ctx, req.Subject, prog) {
		if fp.closed && cons == nil {
			// A new filter that can never match is refused; a durable
			// resuming with its stored filter only hears about it.
			return nil, badFilter("%s", fp.msg)
		}
		warnings = append(warnings, fp.msg)
	}
	if cons == nil {
		if cons, err = f.s.js.CreateConsumer(ctx, stream, consumerConfig(req, src)); err != nil {
			return nil, err
		}
	}

	p := &filterPump{
		stream: stream, consumer: cons.CachedInfo().Name,
		durable: req.Durable != "", deliver: req.DeliverSubject, prog: prog, nc: f.s.egress,
		pos: f.s.streamPatterns(stream),
	}
	p.lastPing.Store(time.Now().UnixNano())
	p.cc, err = cons.Consume(p.handle,
		jetstream.PullMaxMessages(256),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				f.s.log.Debug("filter consume", "stream", p.stream, "consumer", p.consumer, "err", err)
			}
		}))
	if err != nil {
		f.stop(p)
		return nil, err
	}

	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		f.stop(p)
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "filter: the broker is shutting down")
	}
	f.seq++
	p.id = f.node + "." + strconv.FormatUint(f.seq, 10)
	f.pumps[p.id] = p
	var old *filterPump
	if p.durable {
		old = f.byDurable[stream+"/"+p.consumer]
		f.byDurable[stream+"/"+p.consumer] = p
	}
	f.mu.Unlock()
	if old != nil {
		// The durable's previous client is gone or reconnecting; its pump
		// would split the messages with this one.
		f.stop(old)
	}
	return &semaq.FilterStartResponse{ID: p.id, Stream: stream, Consumer: p.consumer, Filter: src, Heartbeat: filterHeartbeat, Warnings: warnings}, nil
}

func consumerConfig(req *semaq.FilterStartRequest, src string) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       req.Durable,
		FilterSubject: req.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       req.AckWait,
		MaxAckPending: req.MaxAckPending,
		Metadata:      map[string]string{semaq.MetadataFilter: src},
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = filterAckWait
	}
	if cfg.MaxAckPending == 0 {
		cfg.MaxAckPending = filterMaxAckPending
	}
	if req.Durable == "" {
		// A safety net: stop deletes it, a crashed broker cannot.
		cfg.InactiveThreshold = 5 * time.Minute
	}
	switch {
	case req.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, req.StartSeq
	case req.Deliver == "new":
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	return cfg
}

// lookup finds the one stream that captures subject.
func (f *filters) lookup(ctx context.Context, subject string) (string, error) {
	names, err := f.s.streamsCapturing(ctx, subject)
	if err != nil {
		return "", err
	}
	switch len(names) {
	case 0:
		return "", semaq.NewAPIError(semaq.ErrNoStream, "no stream captures subject %s", subject)
	case 1:
		return names[0], nil
	default:
		return "", badFilter("subject %s spans streams %v; use a narrower subject", subject, names)
	}
}

// handle runs on the consume goroutine, one message at a time, in stream
// order (redeliveries interleave as JetStream sends them).
func (p *filterPump) handle(jm jetstream.Msg) {
	if p.stopping.Load() {
		// Hand it back at once for whoever consumes next.
		_ = jm.Nak()
		return
	}
	ok, err := p.prog.Match(expr.Message{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data()})
	if err != nil {
		p.errors.Add(1)
		if missingField(err) {
			p.missing.Add(1)
		}
	}
	if !ok {
		p.skipped.Add(1)
		_ = jm.Ack()
		return
	}
	p.matched.Add(1)
	h := jm.Headers()
	if h == nil {
		h = make(nats.Header, 1)
	}
	h[semaq.HdrFilterAck] = []string{jm.Reply()}
	out := &nats.Msg{Subject: p.deliver + "." + jm.Subject(), Header: h, Data: jm.Data()}
	if err := p.nc.PublishMsg(out); err != nil {
		// Not acked: JetStream redelivers it after the ack wait.
		p.matched.Add(^uint64(0))
		_ = jm.Nak()
		return
	}
	recordDelivered(p.pos, jm.Subject(), h)
}

func (p *filterPump) stats() semaq.FilterStats {
	return semaq.FilterStats{Matched: p.matched.Load(), Skipped: p.skipped.Load(), Errors: p.errors.Load(), MissingField: p.missing.Load()}
}

// missingField reports an evaluation that failed because the message lacks
// a field (or header) the filter reads: CEL's "no such key".
// A payload that is not JSON has no fields at all: counted as an error only.
func missingField(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "no such key") && !strings.Contains(msg, "not JSON")
}

// stop ends a pump and forgets it; an ephemeral consumer is deleted.
func (f *filters) stop(p *filterPump) {
	p.stopOnce.Do(func() {
		f.mu.Lock()
		delete(f.pumps, p.id)
		if k := p.stream + "/" + p.consumer; f.byDurable[k] == p {
			delete(f.byDurable, k)
		}
		f.mu.Unlock()
		p.stopping.Store(true)
		if p.cc != nil {
			p.cc.Drain()
			select {
			case <-p.cc.Closed():
			case <-time.After(5 * time.Second):
				p.cc.Stop()
			}
		}
		if !p.durable {
			ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
			defer cancel()
			if err := f.s.js.DeleteConsumer(ctx, p.stream, p.consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				f.s.log.Warn("deleting filter consumer", "stream", p.stream, "consumer", p.consumer, "err", err)
			}
		}
	})
}

func (f *filters) pump(m *nats.Msg) *filterPump {
	id := f.node + "." + api.LastToken(m.Subject)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pumps[id]
}

func (f *filters) apiPing(m *nats.Msg) {
	p := f.pump(m)
	if p == nil {
		api.ReplyErr(f.s.log, m, semaq.NewAPIError(semaq.ErrFilterGone, "filter %s is not running", m.Subject))
		return
	}
	p.lastPing.Store(time.Now().UnixNano())
	api.ReplyJSON(f.s.log, m, p.stats())
}

func (f *filters) apiStop(m *nats.Msg) {
	p := f.pump(m)
	if p == nil {
		api.ReplyErr(f.s.log, m, semaq.NewAPIError(semaq.ErrFilterGone, "filter %s is not running", m.Subject))
		return
	}
	f.stop(p)
	api.ReplyJSON(f.s.log, m, p.stats())
}

// reap ends the pumps whose clients stopped pinging.
func (f *filters) reap() {
	defer close(f.reapDone)
	t := time.NewTicker(filterHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-f.stopReap:
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-filterExpiry * filterHeartbeat).UnixNano()
		var dead []*filterPump
		f.mu.Lock()
		for _, p := range f.pumps {
			if p.lastPing.Load() < cutoff {
				dead = append(dead, p)
			}
		}
		f.mu.Unlock()
		for _, p := range dead {
			f.s.log.Info("filter client gone", "id", p.id, "stream", p.stream, "consumer", p.consumer)
			f.stop(p)
		}
	}
}
