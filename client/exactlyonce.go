package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/semaq"
)

// Out is one output of an exactly-once processor's function: a message
// to publish. The processor sets its Nats-Msg-Id and the Semaq-Source-*
// and Semaq-Processor headers, replacing any the function set.
type Out struct {
	Subject string
	Header  nats.Header
	Data    []byte
}

// ProcessStats counts what a processor did. Pass one to WithProcessStats
// and read it from any goroutine while the processor runs.
type ProcessStats struct {
	// Processed: inputs whose outputs were committed (or that had none)
	// and that were acked.
	Processed atomic.Uint64
	// Skipped: inputs at or before the resume point, acked without
	// calling the function: their outputs were committed before.
	Skipped atomic.Uint64
	// Duplicates: commits found stored already (an atomic batch refused
	// with JetStream's error 10201, a single output answered as a
	// duplicate); their inputs were acked.
	Duplicates atomic.Uint64
	// Retries: publishes and acks tried again after a transient error.
	Retries atomic.Uint64
	// Failed: inputs the function failed, handed back for redelivery.
	Failed atomic.Uint64
	// Terminated: inputs the function failed with Term, never redelivered.
	Terminated atomic.Uint64
}

// ProcessOption configures ProcessExactlyOnce.
type ProcessOption func(*processOptions) error

type processOptions struct {
	outputs  []string
	stats    *ProcessStats
	nakDelay time.Duration
	ackWait  time.Duration
	onError  func(m *Msg, err error)
	group    int // inputs to a batch at most (GroupInputs)
	// afterCommit sees each commit's outcome and may replace it: tests
	// simulate a lost answer or a crash with it (export_test.go).
	afterCommit func(m *Msg, err error) error
}

// OutputSubjects are the subjects the processor writes, in one stream
// (wildcards allowed). Required when the function returns outputs: the
// processor resumes from the last message on them, so no one else may
// write there, and it refuses an output on any other subject.
func OutputSubjects(subjects ...string) ProcessOption {
	return func(o *processOptions) error {
		if len(subjects) == 0 {
			return errors.New("client: OutputSubjects: no subject")
		}
		for _, s := range subjects {
			if err := semaq.CheckSubject(s, true); err != nil {
				return fmt.Errorf("client: OutputSubjects: %w", err)
			}
		}
		o.outputs = append(o.outputs, subjects...)
		return nil
	}
}

// WithProcessStats makes the processor count into s.
func WithProcessStats(s *ProcessStats) ProcessOption {
	return func(o *processOptions) error {
		if s == nil {
			return errors.New("client: WithProcessStats: nil stats")
		}
		o.stats = s
		return nil
	}
}

// WithRetryDelay sets how long an input the function failed waits before
// it is delivered again (default 1s). Inputs after it wait too: the
// processor keeps stream order.
func WithRetryDelay(d time.Duration) ProcessOption {
	return func(o *processOptions) error {
		if d < 0 || d > time.Hour {
			return fmt.Errorf("client: WithRetryDelay: %s is outside 0..1h", d)
		}
		o.nakDelay = d
		return nil
	}
}

// ProcessAckWait sets how long the broker waits for the processor's ack
// of an input before it delivers it again (default 30s, at least 1s). The
// processor holds one input at a time, so a processor started after a
// crash waits up to this long for the input its predecessor held; a
// function that runs longer gets the input again once done, and skips it.
func ProcessAckWait(d time.Duration) ProcessOption {
	return func(o *processOptions) error {
		if d < time.Second {
			return fmt.Errorf("client: ProcessAckWait: %s is under one second", d)
		}
		o.ackWait = d
		return nil
	}
}

// OnError is called with each error of the function (Term's included),
// before the input is handed back or terminated. It runs on the
// processor's goroutine: keep it short.
func OnError(f func(m *Msg, err error)) ProcessOption {
	return func(o *processOptions) error {
		if f == nil {
			return errors.New("client: OnError: nil func")
		}
		o.onError = f
		return nil
	}
}

// Term wraps an error of the function that retrying will not cure: the
// input is terminated (never redelivered, no outputs) instead of retried.
func Term(err error) error {
	if err == nil {
		err = errors.New("terminated")
	}
	return &termError{err}
}

type termError struct{ err error }

func (e *termError) Error() string { return "terminal: " + e.err.Error() }
func (e *termError) Unwrap() error { return e.err }

// errCodeBatchDuplicate is JetStream's refusal of an atomic batch holding
// a message id its duplicate window has seen: the batch was committed.
const errCodeBatchDuplicate = 10201

// ProcessExactlyOnce consumes the messages stored on subject, one at a
// time in stream order, through the durable consumer name, and for each
// calls fn and commits its outputs as one atomic batch before acking it,
// so each input's outputs are stored exactly once (docs/exactly-once.md).
//
// It runs until ctx ends, then returns ctx.Err(): an input whose batch
// was committed but not acked is skipped when a processor of the same
// name starts again. It returns early on an error retrying cannot cure
// (a refusal by the broker, a permission, an output over the bounds),
// naming the input, which stays unacked. fn is called from one goroutine,
// never concurrently. It is meant for one processor of a name at a time.
func (c *Client) ProcessExactlyOnce(ctx context.Context, subject, name string, fn func(m *Msg) ([]Out, error), opts ...ProcessOption) error {
	o := processOptions{nakDelay: time.Second, ackWait: 30 * time.Second, group: 1}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	if fn == nil {
		return semaq.NewAPIError(semaq.ErrBadRequest, "client: ProcessExactlyOnce: nil func")
	}
	if err := semaq.CheckConsumerName(name); err != nil {
		return semaq.NewAPIError(semaq.ErrBadRequest, "client: ProcessExactlyOnce: processor name: %v", err)
	}
	if o.stats == nil {
		o.stats = new(ProcessStats)
	}
	p := &processor{c: c, name: name, subject: subject, fn: fn, o: o}
	if err := p.start(ctx); err != nil {
		return err
	}
	sub, err := p.subscribe(ctx)
	if err != nil {
		return err
	}
	defer sub.Close()
	if o.group > 1 {
		p.peek = &peeker{c: c, stream: p.stream, subject: subject}
		p.grouped = make(map[uint64]bool)
		defer p.peek.reset()
	}
	pause := 50 * time.Millisecond
	for {
		m, err := sub.Next(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && transient(err):
			// A connection moving to another node, a consumer leader
			// being elected: pull again.
			o.stats.Retries.Add(1)
			if !sleep(ctx, pause) {
				return ctx.Err()
			}
			pause = min(2*pause, 2*time.Second)
			continue
		case err != nil:
			return fmt.Errorf("client: processor %s: %w", name, err)
		}
		pause = 50 * time.Millisecond
		if err := p.handle(ctx, m); err != nil {
			// Handed back at once: the next processor of this name
			// gets it without waiting out the ack wait.
			_ = m.Nak(0)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
}

// processor is one run of ProcessExactlyOnce.
type processor struct {
	c       *Client
	name    string
	subject string
	stream  string // the inputs'
	fn      func(m *Msg) ([]Out, error)
	o       processOptions

	outStream string
	// done is the last input whose outputs are committed: an input at or
	// before it is acked without calling fn.
	done uint64
	// peek reads the inputs after the current one, for a group
	// (GroupInputs); grouped are the inputs committed in a group whose
	// own delivery is still to come.
	peek    *peeker
	grouped map[uint64]bool
}

// start finds the input and output streams and the resume point.
func (p *processor) start(ctx context.Context) error {
	var err error
	if p.stream, err = p.c.StreamBySubject(ctx, p.subject); err != nil {
		return fmt.Errorf("client: processor %s: input subject %s: %w", p.name, p.subject, err)
	}
	for _, s := range p.o.outputs {
		st, err := p.c.StreamBySubject(ctx, s)
		if err != nil {
			return fmt.Errorf("client: processor %s: output subject %s: %w", p.name, s, err)
		}
		if p.outStream != "" && st != p.outStream {
			return semaq.NewAPIError(semaq.ErrBadRequest, "client: processor %s: output subject %s is stored in stream %s, %s in %s; the outputs must land in one stream (one atomic batch)",
				p.name, s, st, p.o.outputs[0], p.outStream)
		}
		p.outStream = st
	}
	for _, s := range p.o.outputs {
		seq, err := p.lastSource(ctx, s)
		if err != nil {
			return err
		}
		p.done = max(p.done, seq)
	}
	return nil
}

// lastSource is the input sequence the last output on subj was made from
// (0: none). It reads through a consumer, which a reader's or service's
// grants allow on its subjects, rather than a direct get, which they do not.
func (p *processor) lastSource(ctx context.Context, subj string) (uint64, error) {
	ctx, cancel := p.c.withTimeout(ctx)
	defer cancel()
	prefix := "$JS.API.CONSUMER.CREATE." + p.outStream + "."
	ctx, done := p.c.denied.WatchMatch(ctx, func(s string) bool { return strings.HasPrefix(s, prefix) })
	defer done()
	cons, err := p.c.js.CreateConsumer(ctx, p.outStream, jetstream.ConsumerConfig{
		FilterSubject:     subj,
		DeliverPolicy:     jetstream.DeliverLastPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute,
		MemoryStorage:     true,
	})
	if err != nil {
		if d := context.Cause(ctx); errors.Is(d, semaq.ErrForbidden) {
			err = d
		}
		return 0, fmt.Errorf("client: processor %s: reading the last output on %s (the resume point; its user must be allowed to read its output subjects): %w", p.name, subj, err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), p.c.timeout)
		defer dcancel()
		_ = p.c.js.DeleteConsumer(dctx, p.outStream, cons.CachedInfo().Name)
	}()
	if cons.CachedInfo().NumPending == 0 {
		return 0, nil
	}
	jm, err := cons.Next(jetstream.FetchMaxWait(p.c.timeout))
	if err != nil {
		return 0, fmt.Errorf("client: processor %s: reading the last output on %s: %w", p.name, subj, err)
	}
	h := jm.Headers()
	src, seqS, by := h.Get(semaq.HdrSourceStream), h.Get(semaq.HdrSourceSeq), h.Get(semaq.HdrProcessor)
	seq, err := strconv.ParseUint(seqS, 10, 64)
	if by != p.name || src == "" || err != nil {
		return 0, semaq.NewAPIError(semaq.ErrBadRequest, "client: processor %s: the last message on output subject %s (%s) was not written by it (%s %q, %s %q): its output subjects must be written by it alone",
			p.name, subj, jm.Subject(), semaq.HdrProcessor, by, semaq.HdrSourceSeq, seqS)
	}
	if src != p.stream {
		return 0, nil // made from another input stream: nothing of this one is committed
	}
	return seq, nil
}

// subscribe opens the durable consumer with one message in flight at a
// time: an input handed back waits for its redelivery before the next is
// delivered, so outputs are committed in stream order, which the resume
// point relies on.
func (p *processor) subscribe(ctx context.Context) (*Subscription, error) {
	ctx, cancel := p.c.withTimeout(ctx)
	defer cancel()
	js := p.c.js
	cons, err := js.Consumer(ctx, p.stream, p.name)
	switch {
	case err == nil:
		cfg := cons.CachedInfo().Config
		if cfg.FilterSubject != p.subject {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: processor %s: its durable consumer follows %s, not %s", p.name, cfg.FilterSubject, p.subject)
		}
		if cfg.AckPolicy != jetstream.AckExplicitPolicy {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: processor %s: its durable consumer's ack policy is %s, not explicit", p.name, cfg.AckPolicy)
		}
		if cfg.MaxAckPending != 1 || cfg.AckWait != p.o.ackWait {
			cfg.MaxAckPending, cfg.AckWait = 1, p.o.ackWait
			if cons, err = js.UpdateConsumer(ctx, p.stream, cfg); err != nil {
				return nil, fmt.Errorf("client: processor %s: setting its consumer to one message in flight, ack wait %s: %w", p.name, p.o.ackWait, err)
			}
		}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cons, err = js.CreateConsumer(ctx, p.stream, jetstream.ConsumerConfig{
			Durable:       p.name,
			FilterSubject: p.subject,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       p.o.ackWait,
			MaxAckPending: 1,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return nil, fmt.Errorf("client: processor %s: creating its consumer on %s: %w", p.name, p.subject, err)
		}
	default:
		return nil, fmt.Errorf("client: processor %s: looking up its consumer: %w", p.name, err)
	}
	return &Subscription{
		c: p.c, stream: p.stream, subject: p.subject, cons: cons, name: p.name, durable: true,
		opts: subscribeOptions{prefetch: 32, ackWait: p.o.ackWait},
		done: make(chan struct{}), pull: jsutil.NewPuller(cons),
	}, nil
}

// handle takes one input from delivery to ack.
func (p *processor) handle(ctx context.Context, m *Msg) error {
	st := p.o.stats
	if m.Seq <= p.done {
		// Committed before. One ack attempt: an ack lost brings the
		// input back, to be skipped again, and an input acked already
		// (delivered again while its ack was on its way) may get no
		// answer.
		actx, cancel := context.WithTimeout(ctx, p.c.timeout)
		_ = m.Ack(actx)
		cancel()
		if p.grouped[m.Seq] {
			delete(p.grouped, m.Seq) // counted with its group
		} else {
			st.Skipped.Add(1)
		}
		return nil
	}
	ctx, span := m.StartSpan(ctx, "process "+p.name)
	defer span.End()
	outs, err := p.fn(m)
	if err != nil {
		if p.o.onError != nil {
			p.o.onError(m, err)
		}
		if te, ok := errors.AsType[*termError](err); ok {
			st.Terminated.Add(1)
			return m.Term(te.Error())
		}
		st.Failed.Add(1)
		return m.Nak(p.o.nakDelay)
	}
	var msgs []*nats.Msg
	if len(outs) > 0 {
		if msgs, err = p.batch(ctx, m, outs); err != nil {
			return err
		}
	}
	last := m.Seq
	var more []*Msg
	if p.peek != nil {
		var mmsgs []*nats.Msg
		var spans []trace.Span
		more, mmsgs, spans = p.extend(ctx, m, len(msgs), batchSize(msgs))
		defer func() {
			for _, s := range spans {
				s.End()
			}
		}()
		msgs = append(msgs, mmsgs...)
		if len(more) > 0 {
			last = more[len(more)-1].Seq
		}
	}
	if len(msgs) > 0 {
		if err := p.commit(ctx, m, msgs); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err() // committed, not acked: a restart skips it
	}
	if err := p.ack(ctx, m); err != nil {
		return err
	}
	p.done = last
	for _, in := range more {
		p.grouped[in.Seq] = true
	}
	st.Processed.Add(uint64(1 + len(more)))
	return nil
}

// inputName names m in errors.
func (p *processor) inputName(m *Msg) string {
	return fmt.Sprintf("processor %s: input %s seq %d (%s)", p.name, m.Stream, m.Seq, m.Subject)
}

// batch makes the messages of m's outputs.
func (p *processor) batch(ctx context.Context, m *Msg, outs []Out) ([]*nats.Msg, error) {
	if len(p.o.outputs) == 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: %s: %d outputs, but no OutputSubjects: the processor resumes from the last message on them", p.inputName(m), len(outs))
	}
	if len(outs) > semaq.MaxBatchMsgs {
		return nil, semaq.NewAPIError(semaq.ErrBatchLimit, "client: %s: %d outputs, over the %d one atomic batch holds", p.inputName(m), len(outs), semaq.MaxBatchMsgs)
	}
	seq := strconv.FormatUint(m.Seq, 10)
	msgs := make([]*nats.Msg, len(outs))
	for i, out := range outs {
		if !p.isOutput(out.Subject) {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: %s: output %d is on %s, outside the OutputSubjects %v", p.inputName(m), i, out.Subject, p.o.outputs)
		}
		h := make(nats.Header, len(out.Header)+4)
		for k, v := range out.Header {
			if !ownHeader(k) {
				h[k] = v
			}
		}
		h.Set(semaq.HdrMsgID, m.Stream+":"+seq+":"+strconv.Itoa(i))
		h.Set(semaq.HdrSourceStream, m.Stream)
		h.Set(semaq.HdrSourceSeq, seq)
		h.Set(semaq.HdrProcessor, p.name)
		injectIfAbsent(ctx, h)
		msgs[i] = &nats.Msg{Subject: out.Subject, Header: h, Data: out.Data}
	}
	return msgs, nil
}

// ownHeader reports whether name is, in any case, one of the headers the
// processor sets on an output: a function's own is dropped, since the
// ingress reads header names without regard to case.
func ownHeader(name string) bool {
	for _, h := range [...]string{semaq.HdrMsgID, semaq.HdrSourceStream, semaq.HdrSourceSeq, semaq.HdrProcessor} {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

func (p *processor) isOutput(subj string) bool {
	for _, f := range p.o.outputs {
		if subjectMatches(f, subj) {
			return true
		}
	}
	return false
}

// commit publishes m's batch until it is stored or found stored already,
// retrying transient errors with the same message ids.
func (p *processor) commit(ctx context.Context, m *Msg, msgs []*nats.Msg) error {
	var noStreamSince time.Time
	return p.retry(ctx, m, func(ctx context.Context) (bool, error) {
		ack, err := p.publish(ctx, msgs)
		if p.o.afterCommit != nil {
			err = p.o.afterCommit(m, err)
		}
		switch {
		case err == nil:
			return true, nil
		case isCommitted(err):
			p.o.stats.Duplicates.Add(1)
			return true, nil
		case transient(err) || transient(refusal(ack)):
			return false, err
		case errors.Is(err, semaq.ErrNoStream) || errors.Is(refusal(ack), semaq.ErrNoStream):
			// The output stream was there at start: a node that has
			// just started may not know it yet. One deleted is not
			// waited for long.
			if noStreamSince.IsZero() {
				noStreamSince = time.Now()
			}
			if time.Since(noStreamSince) < noStreamGrace {
				return false, err
			}
		}
		return true, fmt.Errorf("client: %s: publishing its %d outputs: %w", p.inputName(m), len(msgs), err)
	})
}

// noStreamGrace is how long a commit refused for want of a stream is
// tried again.
const noStreamGrace = 30 * time.Second

// publish stores msgs as one atomic batch. One message is atomic on its
// own: it is published alone, which costs JetStream far less than a batch
// (an R1 stream stages each atomic batch in a store of its own), and a
// duplicate of it is answered as one, not refused.
func (p *processor) publish(ctx context.Context, msgs []*nats.Msg) (*semaq.BatchAck, error) {
	if len(msgs) > 1 {
		return p.c.PublishBatch(ctx, msgs, Atomic())
	}
	ack, err := p.c.publishMsg(ctx, msgs[0])
	if err == nil && ack.Duplicate {
		return nil, errDuplicate
	}
	return nil, err
}

// errDuplicate is a single output found stored already.
var errDuplicate = errors.New("the output is a duplicate of one stored")

// ack acknowledges m and waits for the broker to confirm it.
func (p *processor) ack(ctx context.Context, m *Msg) error {
	return p.retry(ctx, m, func(ctx context.Context) (bool, error) {
		err := m.Ack(ctx)
		switch {
		case err == nil:
			return true, nil
		case transient(err):
			return false, err
		}
		return true, fmt.Errorf("client: %s: acking it: %w", p.inputName(m), err)
	})
}

// retry runs attempt, each bounded by the client's timeout, until it is
// done, pausing longer after each transient failure, up to 2s, and
// keeping m's delivery alive meanwhile. It ends with ctx.
func (p *processor) retry(ctx context.Context, m *Msg, attempt func(ctx context.Context) (done bool, err error)) error {
	pause := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, p.c.timeout)
		done, err := attempt(actx)
		cancel()
		if done {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.o.stats.Retries.Add(1)
		_ = m.InProgress()
		if !sleep(ctx, pause) {
			return ctx.Err()
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// sleep waits d, or less when ctx ends (reported false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// refusal is the error of the message that refused an atomic batch, if
// one did: a quota or an overloaded queue refuses the batch for a while.
func refusal(ack *semaq.BatchAck) error {
	if ack == nil || ack.Index == nil || *ack.Index < 0 || *ack.Index >= len(ack.Results) || ack.Results[*ack.Index].Error == nil {
		return nil
	}
	return ack.Results[*ack.Index].Error
}

// isCommitted reports whether err is JetStream's refusal of an atomic
// batch as holding a message id stored already: with ids derived from the
// input, the batch was committed before.
func isCommitted(err error) bool {
	if err == errDuplicate {
		return true
	}
	if ae, ok := errors.AsType[*semaq.APIError](err); ok && ae.ErrCode == errCodeBatchDuplicate {
		return true
	}
	return strings.Contains(err.Error(), "atomic publish batch contains duplicate message id")
}

// transient reports whether err may go away by itself: the broker or
// JetStream unavailable, overloaded or electing a leader, a duplicate id
// still in flight, an answer that did not come in time.
func transient(err error) bool {
	if err == nil {
		return false
	}
	if ae, ok := errors.AsType[*semaq.APIError](err); ok {
		switch ae.ErrCode {
		case semaq.ErrCodeUnavailable, semaq.ErrCodeOverloaded,
			10008, // JetStream temporarily unavailable
			10009, // not the leader
			10158, // a duplicate id in process
			10176: // atomic batch incomplete (a leader change)
			return true
		}
		return ae.Code == 503 || ae.Code == 408 || ae.Code == 429
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrServerShutdown) ||
		errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerLeadershipChanged)
}

// subjectMatches reports whether subj, a literal subject, matches filter
// ('*' a token, '>' the rest).
func subjectMatches(filter, subj string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		st, srest, smore := strings.Cut(subj, ".")
		switch {
		case ft == ">":
			return true
		case ft != "*" && ft != st:
			return false
		case !fmore || !smore:
			return fmore == smore
		}
		filter, subj = frest, srest
	}
}
