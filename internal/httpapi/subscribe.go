package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpauth"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/semaq"
)

// Pull sizes of an event stream. A stream pulls one batch at a time and
// only when it has written the previous one, so what it holds is bounded by
// one batch, in messages and in bytes, however slowly its client reads.
const (
	streamBatch  = 64
	durableBatch = 8 // a durable skips what was pulled and not written (at most once)
	// fetchWait is how long one pull waits at the broker.
	fetchWait = 5 * time.Second
	// ephemeralInactive removes a stream's consumer this long after its
	// last pull even if the front door never gets to delete it (a crash);
	// it is longer than a stream can go without pulling.
	ephemeralInactive = 30 * time.Second
)

// subscribeParams is a subscribe request's query and Last-Event-ID.
type subscribeParams struct {
	deliver  client.DeliverPolicy
	startSeq uint64
	count    int
	filter   string
	durable  string
}

// subscribe streams the messages stored on a subject as Server-Sent Events:
// one "message" event per message, its id the stream sequence and its data
// the message's JSON form (client.Msg.MarshalJSON). A reconnecting
// EventSource sends Last-Event-ID and resumes after it. Query parameters:
// deliver=all|new, start_seq=N, count=N (end after N messages),
// filter=EXPR (docs/filtering.md), durable=NAME (read a durable made with
// POST /api/v1/durables).
//
// A GET changes nothing that outlives it: the stream reads through a
// consumer of its own that acknowledges nothing and is deleted when the
// stream ends (a filtered stream acknowledges on its own consumer, which
// goes with it). Only a durable made on purpose keeps a position.
func (h *Handler) subscribe(w http.ResponseWriter, r *http.Request) {
	subject := r.PathValue("subject")
	if err := checkSubject(subject, true); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	if err := checkPublicSubject(subject); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	if !permitted(w, r, httpauth.Read, subject) {
		return
	}
	p, err := parseSubscribe(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	if _, ok := w.(http.Flusher); !ok {
		writeError(w, http.StatusInternalServerError, semaq.ErrCodeInternal, "streaming is not supported by this connection")
		return
	}
	if r.Method == http.MethodHead {
		// Say whether a GET would stream, without making a consumer.
		if _, err := h.client(r.Context()).StreamBySubject(r.Context(), subject); err != nil {
			writeErr(w, err)
			return
		}
		sse.WriteHeader(w)
		return
	}
	release, ok := h.acquireStream(w)
	if !ok {
		return
	}
	defer release()

	var src eventSource
	if p.filter != "" {
		src, err = h.filteredSource(r.Context(), subject, p)
	} else {
		src, err = h.newPullSource(r.Context(), subject, p)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	defer src.close()

	ew := sse.NewStream(w, h.opts.StreamWriteTimeout)
	ew.Start()
	// The subject passed checkSubject, so it has no line breaks.
	if ew.Write(fmt.Appendf(nil, ": subscribed to %s on stream %s\n\n", subject, src.stream())) != nil {
		return
	}

	ctx, stop := h.streamContext(r)
	defer stop()
	for {
		wait, stopWait := context.WithTimeout(ctx, sse.KeepAlive)
		msg, err := src.next(wait)
		stopWait()
		var revoked *keyRevokedError
		switch {
		case err == nil:
		case errors.As(context.Cause(ctx), &revoked):
			failStream(ew, revoked.Error())
			return
		case errors.Is(err, client.ErrSubscriptionDone), ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			if ew.KeepAlive() != nil {
				h.dropSlow(ew, subject)
				return
			}
			continue
		default:
			failStream(ew, err.Error())
			h.log.Warn("subscribe stream ended", "subject", subject, "err", err)
			return
		}
		body, err := msg.MarshalJSON()
		if err != nil {
			failStream(ew, err.Error())
			return
		}
		if ew.Write(fmt.Appendf(nil, "id: %d\nevent: message\ndata: %s\n\n", msg.Seq, body)) != nil {
			h.dropSlow(ew, subject)
			return
		}
		src.written(ctx, msg)
	}
}

// keyRevokedError ends an event stream whose key stopped being valid.
type keyRevokedError struct{ err error }

func (e *keyRevokedError) Error() string {
	return "the key of this stream is no longer valid (revoked, rotated, expired or its user removed): " + e.err.Error()
}

// streamContext is the context of an event stream of r: done when the
// request ends, the server closes, or the caller's key stops being valid
// (its cause a *keyRevokedError then). stop releases it.
func (h *Handler) streamContext(r *http.Request) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(r.Context())
	stopClosing := context.AfterFunc(h.closing, func() { cancel(nil) })
	stopWatch := func() {}
	if caller := httpauth.From(r.Context()); caller != nil && caller.Recheck != nil {
		stopWatch = watchKey(caller, func(err error) { cancel(&keyRevokedError{err}) })
	}
	return ctx, func() {
		stopWatch()
		stopClosing()
		cancel(nil)
	}
}

// watchKey calls revoked, once, when caller's key stops being valid: at
// each change of the identity store, and at the key's expiry. stop ends
// the watch and waits for its goroutine.
func watchKey(caller *httpauth.Caller, revoked func(error)) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		var expiry <-chan time.Time
		if !caller.Expires.IsZero() {
			t := time.NewTimer(time.Until(caller.Expires))
			defer t.Stop()
			expiry = t.C
		}
		for {
			changed := caller.Changed()
			if err := caller.Recheck(); err != nil {
				revoked(err)
				return
			}
			select {
			case <-changed:
			case <-expiry:
				expiry = nil
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); <-exited }
}

// dropSlow ends a stream whose client did not take an event within the
// write timeout, telling it why if its connection still has room.
func (h *Handler) dropSlow(ew *sse.Stream, subject string) {
	failStream(ew, fmt.Sprintf("slow reader: an event was not taken within %s; the stream is closed", h.opts.StreamWriteTimeout))
	h.log.Debug("event stream client too slow", "subject", subject)
}

// parseSubscribe reads the query parameters and Last-Event-ID of a
// subscribe request. Numbers are bounded in length before they are parsed.
func parseSubscribe(r *http.Request) (subscribeParams, error) {
	q := r.URL.Query()
	var p subscribeParams
	for k, vs := range q {
		switch k {
		case "deliver", "filter", "durable", "start_seq", "count":
			if len(vs) > 1 {
				return p, fmt.Errorf("%s is given %d times", k, len(vs))
			}
		default:
			return p, fmt.Errorf("unknown query parameter %q (want deliver, start_seq, count, filter, durable)", k)
		}
	}
	switch d := q.Get("deliver"); d {
	case "", "all":
	case "new":
		p.deliver = client.DeliverNew
	default:
		return p, fmt.Errorf("deliver=%q: want all or new", d)
	}
	p.filter = q.Get("filter")
	if len(p.filter) > maxFilterLen {
		return p, fmt.Errorf("filter is %d bytes; the limit is %d", len(p.filter), maxFilterLen)
	}
	if d := q.Get("durable"); d != "" {
		if err := semaq.CheckConsumerName(d); err != nil {
			return p, fmt.Errorf("durable=%q: %w", d, err)
		}
		if p.filter != "" {
			return p, errors.New("filter and durable together are not available over HTTP; create the durable with its filter from the SDK")
		}
		p.durable = d
	}
	if s := q.Get("start_seq"); s != "" {
		n, err := parseSeq(s)
		if err != nil || n == 0 {
			return p, fmt.Errorf("start_seq=%.32q: want a sequence number from 1", s)
		}
		p.startSeq = n
	}
	// Last-Event-ID is what an EventSource sends when it reconnects: resume
	// after it, whatever start_seq says.
	next, resume, err := sse.ResumeSeq(r.Header)
	if err != nil {
		return p, fmt.Errorf("Last-Event-ID %.32q is not a sequence number", r.Header.Get(sse.HeaderLastEventID))
	}
	if resume {
		p.startSeq = next
	}
	if c := q.Get("count"); c != "" {
		n, err := parseSeq(c)
		if err != nil || n < 1 || n > math.MaxInt32 {
			return p, fmt.Errorf("count=%.32q: want an integer from 1 to %d", c, math.MaxInt32)
		}
		p.count = int(n)
	}
	return p, nil
}

// maxFilterLen bounds a filter expression given in a query.
const maxFilterLen = 4096

// parseSeq parses a decimal uint64, refusing a literal longer than any
// uint64 before it parses it.
func parseSeq(s string) (uint64, error) {
	if len(s) > 20 {
		return 0, errors.New("number too long")
	}
	return strconv.ParseUint(s, 10, 64)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// eventSource is where an event stream's messages come from.
type eventSource interface {
	stream() string
	// next waits for the next message.
	next(ctx context.Context) (*client.Msg, error)
	// written is called once the message's event is out.
	written(ctx context.Context, m *client.Msg)
	close()
}

// pullSource reads a subject through a pull consumer, one bounded batch
// at a time: the broker sends only what was asked for, so a client that
// reads slowly holds at most one batch here and nothing in the shared NATS
// connection's buffers.
type pullSource struct {
	h         *Handler
	c         *client.Client // the connection it reads with
	js        jetstream.JetStream
	streamN   string
	cons      jetstream.Consumer
	ephemeral bool
	batchN    int
	maxBytes  int
	remaining int // messages left under count; -1 is no limit
	pull      *jsutil.Puller
}

func (h *Handler) newPullSource(ctx context.Context, subject string, p subscribeParams) (*pullSource, error) {
	stream, err := h.client(ctx).StreamBySubject(ctx, subject)
	if err != nil {
		return nil, err
	}
	c := h.client(ctx)
	s := &pullSource{h: h, c: c, js: h.jsOf(c), streamN: stream, batchN: streamBatch, maxBytes: h.pullBytes(), remaining: -1}
	if p.count > 0 {
		s.remaining = p.count
	}
	if p.durable != "" {
		cons, err := h.httpDurable(ctx, stream, subject, p.durable)
		if err != nil {
			return nil, err
		}
		s.cons, s.batchN, s.pull = cons, durableBatch, jsutil.NewPuller(cons)
		return s, nil
	}
	cfg := jetstream.ConsumerConfig{
		FilterSubject:     subject,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: ephemeralInactive,
		MemoryStorage:     true,
		Metadata:          map[string]string{metaHTTP: "stream"},
	}
	setStart(&cfg, p)
	cons, err := s.js.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, jsError(err)
	}
	s.cons, s.ephemeral, s.pull = cons, true, jsutil.NewPuller(cons)
	return s, nil
}

// pullBytes is the byte budget of one pull: DefaultStreamBufferBytes, or
// room for one message of the largest size when that is more (a message
// larger than a pull's budget would never be delivered).
func (h *Handler) pullBytes() int {
	return max(h.opts.StreamBufferBytes, h.opts.MaxBody+h.opts.MaxHeaderBytes+4096)
}

func setStart(cfg *jetstream.ConsumerConfig, p subscribeParams) {
	switch {
	case p.startSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, p.startSeq
	case p.deliver == client.DeliverNew:
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
}

func (s *pullSource) stream() string { return s.streamN }

func (s *pullSource) next(ctx context.Context) (*client.Msg, error) {
	for {
		if s.remaining == 0 {
			return nil, client.ErrSubscriptionDone
		}
		n := s.batchN
		if s.remaining > 0 {
			n = min(n, s.remaining)
		}
		jm, err := s.pull.Next(ctx, nil, n, jetstream.FetchMaxBytes(s.maxBytes), jetstream.FetchMaxWait(fetchWait))
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("pulling from %s: %w", s.streamN, err)
		}
		md, err := jm.Metadata()
		if err != nil {
			continue // not a stream message
		}
		if s.remaining > 0 {
			s.remaining--
		}
		return &client.Msg{Subject: jm.Subject(), Stream: md.Stream, Seq: md.Sequence.Stream, Time: md.Timestamp,
			NumDelivered: md.NumDelivered, Header: jm.Headers(), Data: jm.Data()}, nil
	}
}

func (s *pullSource) written(context.Context, *client.Msg) {}

// close deletes an ephemeral consumer at once; an open pull ends on its
// own within fetchWait. A durable keeps its position.
func (s *pullSource) close() {
	if !s.ephemeral || !s.c.Conn().IsConnected() {
		// Nothing to delete with, or closed or reconnecting (a revoked
		// key's): the consumer lapses after its inactive threshold.
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.js.DeleteConsumer(ctx, s.streamN, s.cons.CachedInfo().Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.h.log.Warn("deleting an event stream's consumer", "stream", s.streamN, "err", err)
	}
}

// sseFilterAckPending bounds the matches of a filtered event stream in
// flight between the broker and the writer.
const sseFilterAckPending = 64

// filteredSource is a filtered subscription of the SDK (the broker runs
// the filter): ephemeral, acknowledged on its own consumer as events go
// out, and deleted when the stream ends.
type filteredSource struct{ sub *client.Subscription }

func (h *Handler) filteredSource(ctx context.Context, subject string, p subscribeParams) (*filteredSource, error) {
	// The SDK buffers up to max_ack_pending matches per subscription: keep
	// it to about what the event stream pulls ahead of its writes.
	opts := []client.SubscribeOption{client.WithFilter(p.filter), client.WithDeliver(p.deliver), client.WithMaxAckPending(sseFilterAckPending)}
	if p.startSeq > 0 {
		opts = append(opts, client.WithStartSequence(p.startSeq))
	}
	if p.count > 0 {
		opts = append(opts, client.WithMaxMessages(p.count), client.WithPrefetch(min(p.count, 128)))
	}
	sub, err := h.client(ctx).Subscribe(ctx, subject, opts...)
	if err != nil {
		return nil, err
	}
	return &filteredSource{sub}, nil
}

func (s *filteredSource) stream() string { return s.sub.Stream() }
func (s *filteredSource) next(ctx context.Context) (*client.Msg, error) {
	return s.sub.Next(ctx)
}
func (s *filteredSource) written(ctx context.Context, m *client.Msg) {
	_ = m.Ack(context.WithoutCancel(ctx))
}
func (s *filteredSource) close() { _ = s.sub.Close() }
