package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/semaq"
)

// Answers in session chains (docs/provenance.md#answers). A queue with
// ChainAnswers has its dispatcher bind each job of a session with the
// chain its answer goes to (BindJob); the relay that stores the stream's
// terminal record marks it with that chain (the SQ-Answer-* headers, which
// no writer can set). A durable consumer of the terminal records,
// answerConsumer, pulled by every node that has seen such a binding,
// turns each marked one into an answer record: it reads the stream's
// records back from SQ_TOKENS (what was stored, not what the relay saw),
// builds a semaq.AnswerRecord and publishes it on the chain's subject
// through the ingress, as the broker, with the request's tenant and
// session; the ingress chains it like any message of the session. The
// terminal record is acked once the ingress has stored the answer record,
// so a node that dies in between leaves it to another node (or to itself,
// restarted). The record's Nats-Msg-Id (semaq.AnswerMsgID) makes a second writing of it a duplicate, which the chain takes no
// link for.
//
// A stream whose binding reached its relay's node only after it ended
// (the notice and the writer's records travel on different connections)
// was stored unmarked: that node records its answer at once, without the
// consumer (chainBound), and counts it as unbound.

// The headers the relay marks a terminal record of a chained answer with.
// A writer's own are dropped (isAnswerHeader).
const (
	HdrAnswerChain   = "SQ-Answer-Chain"   // the chain's subject
	HdrAnswerSession = "SQ-Answer-Session" // the request's AI-Session
	HdrAnswerTenant  = "SQ-Answer-Tenant"  // the request's AI-Tenant
)

// Bounds of the answer recorder.
const (
	// answerConsumer is the durable consumer of terminal records.
	answerConsumer = "semaq-answer-chains"
	// answerMaxPending bounds the terminal records handed out and not yet
	// acked, cluster-wide; a node pulls answerPull at a time and writes
	// one answer record after another.
	answerMaxPending = 256
	answerPull       = 16
	// answerAckWait is how long a node has to write one answer record;
	// answerMaxDeliver how often a record is tried before it is given up
	// (counted as failed), answerBackoff the wait before a retry.
	answerAckWait    = time.Minute
	answerMaxDeliver = 10
	answerBackoff    = 2 * time.Second
	// answerWait bounds reading a stream back and the ingress's ack.
	answerWait = 30 * time.Second
	// maxLateAnswers bounds the unbound answers written at once on a node;
	// past it they are counted failed.
	maxLateAnswers = 64
)

// isAnswerHeader reports whether a header is one of the relay's marks, in
// any case.
func isAnswerHeader(k string) bool {
	const p = "SQ-Answer-"
	return len(k) >= len(p) && strings.EqualFold(k[:len(p)], p)
}

// markAnswer marks the terminal record among msgs, of claim c, with its
// answer's chain. mu is held.
func markAnswer(c *claim, msgs []*nats.Msg) {
	if !c.chain.On() {
		return
	}
	for _, m := range msgs {
		if !strings.HasSuffix(m.Subject, ".end") {
			continue
		}
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(HdrAnswerChain, c.chain.Subject)
		m.Header.Set(HdrAnswerSession, c.chain.Session)
		if c.chain.Tenant != "" {
			m.Header.Set(HdrAnswerTenant, c.chain.Tenant)
		}
	}
}

// chainBound notes where id's answer is chained, after bind made or kept
// its claim, and starts this node's recorder. A stream that has ended
// already was stored unmarked: its answer is written now. mu is held.
func (ts *Store) chainBound(id string, ch api.AnswerChain) {
	ts.startAnswers()
	c := ts.claims[id]
	if c == nil || c.chain.On() {
		return
	}
	c.chain = ch
	if !c.ended || c.records == 0 {
		return
	}
	if ts.lateAnswers >= maxLateAnswers {
		ts.metrics.ChainAnswer("failed")
		ts.log.Warn("answer not chained: too many unbound answers being written", "id", id, "limit", maxLateAnswers)
		return
	}
	ts.lateAnswers++
	tt := c.tenant
	if !ts.gate.Go("answer", func(ctx context.Context) {
		defer func() { ts.mu.Lock(); ts.lateAnswers--; ts.mu.Unlock() }()
		ctx, cancel := context.WithTimeout(ctx, 2*answerWait)
		defer cancel()
		// The terminal record's sequence is not known here: read to the end.
		res := ts.writeAnswer(ctx, tt, id, 0, ch)
		if res == "chained" || res == "duplicate" {
			res = "unbound"
		}
		ts.metrics.ChainAnswer(res)
	}) {
		ts.lateAnswers--
	}
}

// startAnswers starts this node's recorder once. mu is held.
func (ts *Store) startAnswers() {
	if ts.answering || ts.closed {
		return
	}
	ts.answering = true
	ts.gate.Go("answers", ts.answerLoop)
}

// answerConfig is the durable consumer of terminal records.
func answerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       answerConsumer,
		Description:   "SemaQ: token-stream answers to append to session chains",
		FilterSubject: semaq.TokenPrefix + "*.*.end",
		// From the first record SQ_TOKENS holds: a stream may end before
		// the first node to see a chained binding has made the consumer.
		// Unmarked terminal records are acked at once.
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       answerAckWait,
		MaxDeliver:    answerMaxDeliver,
		MaxAckPending: answerMaxPending,
	}
}

// answerLoop pulls terminal records and writes the answer records of the
// marked ones, until the gate closes.
func (ts *Store) answerLoop(ctx context.Context) {
	var cons jetstream.Consumer
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
		cctx, cancel := context.WithTimeout(ctx, answerWait)
		var err error
		cons, err = ts.js.CreateOrUpdateConsumer(cctx, semaq.TokenStream, answerConfig())
		cancel()
		if err == nil {
			break
		}
		ts.log.Warn("answer chains: making the consumer of terminal records", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
	p := jsutil.NewPuller(cons)
	defer p.Drain(time.Second, func(m jetstream.Msg) { _ = m.Nak() })
	for {
		m, err := p.Next(ctx, nil, answerPull, jetstream.FetchMaxWait(5*time.Second))
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// A consumer deleted by hand is made again.
			ts.log.Debug("answer chains: pulling", "err", err)
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				cctx, cancel := context.WithTimeout(ctx, answerWait)
				if c, err := ts.js.CreateOrUpdateConsumer(cctx, semaq.TokenStream, answerConfig()); err == nil {
					cons, p = c, jsutil.NewPuller(c)
				}
				cancel()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		ts.answer(ctx, m)
	}
}

// answer writes the answer record of the terminal record m, if it is
// marked, and acks m when the record is stored (or cannot be).
func (ts *Store) answer(ctx context.Context, m jetstream.Msg) {
	h := m.Headers()
	ch := api.AnswerChain{Subject: h.Get(HdrAnswerChain), Session: h.Get(HdrAnswerSession), Tenant: h.Get(HdrAnswerTenant)}
	tt, id, _, ok := semaq.ParseTokenSubject(m.Subject())
	md, err := m.Metadata()
	if !ch.On() || !ok || err != nil {
		_ = m.Ack()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*answerWait)
	defer cancel()
	res := ts.writeAnswer(ctx, tt, id, md.Sequence.Stream, ch)
	if res == "retry" {
		if md.NumDelivered < answerMaxDeliver {
			_ = m.NakWithDelay(answerBackoff * time.Duration(md.NumDelivered))
			return
		}
		res = "failed"
		ts.log.Warn("answer not chained: given up after retries", "id", id, "subject", ch.Subject, "tries", md.NumDelivered)
	}
	ts.metrics.ChainAnswer(res)
	_ = m.Ack()
}

// writeAnswer reads request id's stream (of tenant token tt, up to its
// terminal record at seq end; 0: up to any terminal record), and
// publishes its answer record on ch's subject through the ingress. It
// returns chained, duplicate, refused (not to be retried) or retry.
func (ts *Store) writeAnswer(ctx context.Context, tt, id string, end uint64, ch api.AnswerChain) string {
	rec, stamp, err := ts.readAnswer(ctx, tt, id, end)
	if err != nil {
		ts.log.Warn("answer chains: reading the token stream back", "id", id, "err", err)
		return "retry"
	}
	data, err := json.Marshal(rec)
	if err != nil {
		ts.log.Warn("answer not chained", "id", id, "err", err)
		return "refused"
	}
	msg := nats.NewMsg(ch.Subject)
	msg.Data = data
	msg.Header.Set(semaq.HdrSession, ch.Session)
	if ch.Tenant != "" {
		msg.Header.Set(semaq.HdrTenant, ch.Tenant)
	}
	msg.Header.Set(semaq.HdrAnswerOf, id)
	msg.Header.Set(semaq.HdrMsgID, semaq.AnswerMsgID(ch.Tenant, id))
	// The stream's end, the same however often it is written: a strictly
	// ordered session takes it in its order.
	msg.Header.Set(semaq.HdrTimestamp, stamp.UTC().Format(time.RFC3339Nano))
	rctx, cancel := context.WithTimeout(ctx, answerWait)
	defer cancel()
	resp, err := ts.nc.RequestMsgWithContext(rctx, msg)
	if err != nil {
		ts.log.Warn("answer chains: writing the answer record", "id", id, "subject", ch.Subject, "err", err)
		return "retry"
	}
	var ack struct {
		Error     *semaq.APIError `json:"error"`
		Duplicate bool            `json:"duplicate"`
		Seq       uint64          `json:"seq"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		ts.log.Warn("answer chains: a reply that is no ack", "id", id, "err", err)
		return "retry"
	}
	switch {
	case ack.Error != nil && (ack.Error.Code >= 500 || ack.Error.Code == 429):
		ts.log.Debug("answer chains: the chain is busy; retrying", "id", id, "err", ack.Error.Description)
		return "retry"
	case ack.Error != nil:
		ts.log.Warn("answer not chained: the chain's stream refused it", "id", id, "subject", ch.Subject, "err", ack.Error.Description)
		return "refused"
	case ack.Duplicate:
		return "duplicate"
	}
	return "chained"
}

// readAnswer reads request id's stored records, up to the terminal record
// at seq end (0: the first terminal record), and puts its answer record
// together; stamp is the terminal record's time.
func (ts *Store) readAnswer(ctx context.Context, tt, id string, end uint64) (rec *semaq.AnswerRecord, stamp time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, answerWait)
	defer cancel()
	cons, err := ts.js.OrderedConsumer(ctx, semaq.TokenStream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{semaq.TokenSubjectFilter(tt, id)},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: answerWait,
	})
	if err != nil {
		return nil, stamp, err
	}
	defer func() {
		if ci := cons.CachedInfo(); ci != nil {
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = ts.js.DeleteConsumer(dctx, semaq.TokenStream, ci.Name)
		}
	}()
	a := answerBuilder{rec: semaq.AnswerRecord{RequestID: id}, hash: semaq.NewAnswerHash()}
	for {
		batch, err := cons.Fetch(64, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, stamp, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return nil, stamp, err
			}
			terminal, err := a.add(m.Data())
			if err != nil {
				return nil, stamp, fmt.Errorf("record %d: %w", md.Sequence.Stream, err)
			}
			if terminal && (end == 0 || md.Sequence.Stream >= end) {
				return a.done(), md.Timestamp, nil
			}
		}
		if err := batch.Error(); err != nil && !jsutil.NoMessage(err) {
			return nil, stamp, err
		}
		if got == 0 {
			return nil, stamp, fmt.Errorf("token stream %s: its terminal record is not stored (or its records are gone)", id)
		}
	}
}

// answerBuilder puts an answer record together from the records of a
// stream, in order.
type answerBuilder struct {
	rec   semaq.AnswerRecord
	hash  *semaq.AnswerHash
	text  strings.Builder
	calls []semaq.FunctionCallFragment
	size  int
}

// add takes the next record and reports whether it is terminal.
func (a *answerBuilder) add(data []byte) (bool, error) {
	a.hash.Add(data)
	a.rec.Records++
	c, err := semaq.ParseTokenChunk(data)
	if err != nil {
		return false, err
	}
	switch {
	case c.Final != nil:
		a.rec.FinishReason, a.rec.Usage = c.Final.FinishReason, c.Final.Usage
		return true, nil
	case c.Error != nil:
		a.rec.Error = c.Error
		return true, nil
	}
	a.rec.Tokens += uint64(max(c.N, 0))
	a.keep(c.Text, func(s string) { a.text.WriteString(s) })
	if f := c.Func; f != nil {
		i := slices.IndexFunc(a.calls, func(have semaq.FunctionCallFragment) bool { return have.Index == f.Index })
		if i < 0 {
			a.calls = append(a.calls, semaq.FunctionCallFragment{Index: f.Index})
			i = len(a.calls) - 1
		}
		call := &a.calls[i]
		if f.ID != "" {
			call.ID = f.ID
		}
		if f.Name != "" {
			call.Name = f.Name
		}
		a.keep(f.Arguments, func(s string) { call.Arguments += s })
	}
	return false, nil
}

// keep adds s through add, within semaq.MaxAnswerText bytes in all.
func (a *answerBuilder) keep(s string, add func(string)) {
	if room := semaq.MaxAnswerText - a.size; len(s) > room {
		s, a.rec.Truncated = s[:max(room, 0)], true
	}
	a.size += len(s)
	add(s)
}

// done is the record, its calls in index order.
func (a *answerBuilder) done() *semaq.AnswerRecord {
	a.rec.Text = a.text.String()
	slices.SortFunc(a.calls, func(x, y semaq.FunctionCallFragment) int { return x.Index - y.Index })
	a.rec.Calls = a.calls
	a.rec.RecordsSHA256 = a.hash.Sum()
	return &a.rec
}

// startAnswersIfKept starts the recorder at Start when the consumer of
// terminal records exists: answers of an earlier run may wait in it.
func (ts *Store) startAnswersIfKept(ctx context.Context) {
	if _, err := ts.js.Consumer(ctx, semaq.TokenStream, answerConsumer); err != nil {
		return
	}
	ts.mu.Lock()
	ts.startAnswers()
	ts.mu.Unlock()
}
