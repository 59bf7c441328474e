// Package dlq is the dead-letter queue. JetStream gives up on a message that exceeds its
// consumer's MaxDeliver, or that the consumer terminates, and only says so in
// an advisory (nats-server#5049). The broker follows those advisories and
// copies each such message, payload and headers, into the stream SQ_DLQ on
// $SQ.dlq.<stream>.<consumer>, with AI-DLQ-* headers saying why. Replay
// sends it back through the ingress to its public subject.
//
// One node handles each advisory (queue group semaq.dlq). A dead letter's
// Nats-Msg-Id is "<stream>:<seq>:<consumer>", so a repeated advisory, or the
// advisory that follows a capture (DLQCaptureRequest), stores nothing new.
package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/quietlog"
	"github.com/semaq/semaq/semaq"
)

const (
	queueGroup = "semaq.dlq"
	// maxAge is how long a dead letter is kept.
	maxAge = 14 * 24 * time.Hour
	// duplicates is SQ_DLQ's dedup window: the same dead letter reported
	// twice within it is stored once.
	duplicates = time.Hour
	// listDefault and listMax bound one list reply.
	listDefault = 100
	listMax     = 1000
	// replayBudget bounds one replay-all request, well inside the SDK's
	// default timeout; the caller asks again for the rest.
	replayBudget = 3 * time.Second
	// reasonMax bounds a termination reason copied into a header.
	reasonMax = 1024
	// maxMsgIDLen is the longest Nats-Msg-Id the ingress takes.
	maxMsgIDLen = semaq.MaxEnvelopeValue
)

// JetStream advisory subjects the DLQ follows: <prefix>.<stream>.<consumer>.
const (
	advisoryMaxDeliveries = server.JSAdvisoryConsumerMaxDeliveryExceedPre
	advisoryTerminated    = server.JSAdvisoryConsumerMsgTerminatedPre
)

// natsMsgSizeHeader gives the payload size of a headers-only delivery.
const natsMsgSizeHeader = "Nats-Msg-Size"

// errNotSemaqStream marks advisories of streams SemaQ does not manage (its
// own buckets, SQ_DLQ itself): they are not dead-lettered.
var errNotSemaqStream = errors.New("not a SemaQ stream")

// streamConfig is SQ_DLQ. It is not a SemaQ stream (no semaq.version
// metadata): the ingress does not serve it and stream ls does not show it.
func streamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        semaq.DLQStream,
		Description: "SemaQ dead letters: messages consumers gave up on, with payload, headers and reason",
		Subjects:    []string{semaq.DLQPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      maxAge,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		Duplicates:  duplicates,
		Replicas:    max(replicas, 1),
		// Readers may fetch a dead letter too large for a JSON reply
		// straight from the stream (the SDK does).
		AllowDirect: true,
	}
}

// Pending limits of the advisory subscriptions, as the ingress's: past
// them NATS would drop advisories, and with them dead letters; a burst of
// failures must queue instead.
const (
	pendingMsgs  = 1 << 16
	pendingBytes = 64 << 20
)

// Deps is what the dead-letter queue needs from the node.
type Deps struct {
	// Log gets dead letters stored, purged, and those that could not be.
	// Nil logs nothing.
	Log *slog.Logger
	// JS creates SQ_DLQ, reads the streams dead letters come from and
	// writes SQ_DLQ: the internal connection's JetStream.
	JS jetstream.JetStream
	// Replicas of SQ_DLQ (0 means 1); a stream with fewer is raised to
	// them, one with more keeps its own.
	Replicas int
	// Conn follows the advisories (queue group semaq.dlq), sends raw
	// JetStream API requests and replays dead letters through the ingress:
	// the internal connection.
	Conn *nats.Conn
	// IsSemaqStream reports whether a stream is one SemaQ manages; the
	// others (its own buckets, SQ_DLQ itself) are not dead-lettered.
	IsSemaqStream func(*jetstream.StreamConfig) bool
	// OnDeadLetter counts a dead letter stored from an advisory or a
	// capture (not those Put stores for a caller). Nil counts nothing.
	OnDeadLetter func(stream, reason string)
	// OnRefused counts an advisory not acted on: "not_advisory" (it
	// carries a reply subject or headers, so JetStream delivered it there
	// for someone: a consumer's delivery or an API answer, not an
	// advisory) or "unconfirmed" (the consumer it names does not confirm
	// it). Nil counts nothing.
	OnRefused func(reason string)
	// Audit records each purge and replay (docs/security.md, Audit). Nil
	// records nothing.
	Audit api.AuditFunc
}

// Store is a node's dead-letter queue: the advisory subscriptions, the
// writer of SQ_DLQ (Put) and the $SQ.API.DLQ handlers. Its methods are safe
// for concurrent use.
type Store struct {
	log  *slog.Logger
	deps Deps

	subs      []*nats.Subscription
	stop      chan struct{} // closed by Close: no more retries
	closeOnce sync.Once

	refusals quietlog.Gate // a flood of forgeries logs once a second
}

// Open makes sure SQ_DLQ exists and follows the advisories; the advisory
// handler runs on the subscriptions' goroutines until Close. The API is
// served by whoever subscribes Handlers.
func Open(ctx context.Context, deps Deps) (*Store, error) {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.OnDeadLetter == nil {
		deps.OnDeadLetter = func(string, string) {}
	}
	if deps.Audit == nil {
		deps.Audit = api.NoAudit
	}
	if deps.OnRefused == nil {
		deps.OnRefused = func(string) {}
	}
	s := &Store{log: deps.Log, deps: deps, stop: make(chan struct{})}
	if _, err := jsutil.EnsureStream(ctx, deps.JS, streamConfig(deps.Replicas)); err != nil {
		return nil, fmt.Errorf("dead-letter stream %s: %w", semaq.DLQStream, err)
	}
	for _, prefix := range []string{advisoryMaxDeliveries, advisoryTerminated} {
		sub, err := deps.Conn.QueueSubscribe(prefix+".>", queueGroup, s.HandleAdvisory)
		if err == nil {
			err = sub.SetPendingLimits(pendingMsgs, pendingBytes)
		}
		if err != nil {
			s.unsubscribe()
			return nil, fmt.Errorf("dead-letter advisories: %w", err)
		}
		s.subs = append(s.subs, sub)
	}
	return s, nil
}

func (s *Store) unsubscribe() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
}

// Close stops following the advisories: the subscriptions drain (the
// advisories already received are handled, without retries) and Close
// waits for them, or until ctx is done. Put and the handlers keep working
// while the connection does. Idempotent.
func (s *Store) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		close(s.stop)
		for _, sub := range s.subs {
			if err := sub.Drain(); err != nil {
				_ = sub.Unsubscribe()
			}
		}
	})
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for _, sub := range s.subs {
		for sub.IsValid() {
			select {
			case <-ctx.Done():
				return fmt.Errorf("dead-letter advisories: draining: %w", ctx.Err())
			case <-tick.C:
			}
		}
	}
	return nil
}

func (s *Store) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// Event is one message a consumer gave up on.
type Event struct {
	Stream, Consumer string
	Seq, Deliveries  uint64
	Reason           string // max_deliveries, terminated or "terminated: <why>"
}

// key identifies the dead letter of ev: its Nats-Msg-Id in SQ_DLQ.
func (ev *Event) key() string {
	return ev.Stream + ":" + strconv.FormatUint(ev.Seq, 10) + ":" + ev.Consumer
}

// advisory holds the fields SemaQ reads from JetStream's max-deliveries
// and terminated advisories.
type advisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
	Reason     string `json:"reason"`
}

func parseAdvisory(data []byte) (Event, error) {
	var a advisory
	if err := json.Unmarshal(data, &a); err != nil {
		return Event{}, fmt.Errorf("advisory is not JSON: %w", err)
	}
	ev := Event{Stream: a.Stream, Consumer: a.Consumer, Seq: a.StreamSeq, Deliveries: a.Deliveries}
	switch a.Type {
	case server.JSConsumerDeliveryExceededAdvisoryType:
		ev.Reason = semaq.DLQReasonMaxDeliveries
	case server.JSConsumerDeliveryTerminatedAdvisoryType:
		ev.Reason = termReason(a.Reason)
	default:
		return ev, fmt.Errorf("advisory type %q is neither max deliveries nor terminated", a.Type)
	}
	return ev, ev.check()
}

// check refuses events whose names cannot form the dead letter's subject.
func (ev *Event) check() error {
	if err := semaq.CheckStreamName(ev.Stream); err != nil {
		return err
	}
	if err := semaq.CheckConsumerName(ev.Consumer); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	if ev.Seq == 0 {
		return errors.New("stream sequence 0")
	}
	return nil
}

// deletedReason is the Reason of JetStream's termination of a message
// deleted from its stream while a consumer held it unacked (its reason
// text, as termReason keeps it).
var deletedReason = termReason("Unacknowledged message was deleted")

// termReason is AI-DLQ-Reason for a termination: "terminated", or
// "terminated: <why>" with why made fit for a header line.
func termReason(why string) string {
	why = strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, why))
	if why == "" {
		return semaq.DLQReasonTerminated
	}
	if len(why) > reasonMax {
		n := reasonMax
		for n > 0 && !utf8.RuneStart(why[n]) {
			n--
		}
		why = why[:n]
	}
	return semaq.DLQReasonTerminated + ": " + why
}

// HandleAdvisory dead-letters the message an advisory reports: the
// advisory subscriptions call it. The advisory's word is not enough, since a
// user can make JetStream deliver a stored copy of one to the advisory
// subject (a consumer's deliver subject, an API request's reply subject):
// a message with a reply subject or headers is no advisory, and the
// consumer it names must confirm it (confirm). A refusal is counted and
// logged. A failure to store is retried briefly and then logged with
// everything needed to find the message by hand: it is never dropped
// without a word.
func (s *Store) HandleAdvisory(m *nats.Msg) {
	if m.Reply != "" || len(m.Header) > 0 {
		// JetStream publishes its advisories bare; what carries an ack
		// subject or headers was delivered there on someone's behalf.
		s.refuse("not_advisory", "a message on an advisory subject with a reply subject or headers: delivered there by a consumer or an API answer, not published by JetStream",
			"subject", m.Subject, "reply", m.Reply)
		return
	}
	ev, err := parseAdvisory(m.Data)
	if err != nil {
		s.log.Warn("dead-letter advisory ignored", "subject", m.Subject, "err", err)
		return
	}
	if ev.Stream == semaq.DLQStream {
		return // a dead letter's own consumer gave up on it; it stays where it is
	}
	if ev.Reason == deletedReason {
		// Deleted while a consumer held it: nobody gave up on it (an
		// answered work-queue job the broker removed, which a dispatch
		// consumer recreated after a failover still held).
		s.log.Debug("termination of a deleted message: no dead letter", "stream", ev.Stream, "seq", ev.Seq, "consumer", ev.Consumer)
		return
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		err = s.confirm(ctx, ev)
		if err == nil {
			_, err = s.deadLetter(ctx, ev, true)
		}
		cancel()
		var unconfirmed *unconfirmedError
		switch {
		case err == nil:
			return
		case errors.As(err, &unconfirmed):
			s.refuse("unconfirmed", "a dead-letter advisory JetStream does not confirm: "+unconfirmed.why,
				"subject", m.Subject, "stream", ev.Stream, "seq", ev.Seq, "consumer", ev.Consumer, "reason", ev.Reason)
			return
		case errors.Is(err, errNotSemaqStream):
			s.log.Debug("advisory of a stream SemaQ does not manage", "subject", m.Subject)
			return
		case attempt < 3 && !s.stopping() && !s.deps.Conn.IsDraining() && !s.deps.Conn.IsClosed():
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond) // back off before a retry
			continue
		}
		s.log.Error("message could not be dead-lettered", "stream", ev.Stream, "seq", ev.Seq,
			"consumer", ev.Consumer, "reason", ev.Reason, "err", err)
		return
	}
}

// unconfirmedError says why JetStream does not confirm an advisory.
type unconfirmedError struct{ why string }

func (e *unconfirmedError) Error() string { return "advisory not confirmed: " + e.why }

// confirm asks JetStream whether the consumer an advisory names could have
// sent it: the consumer exists on that stream, has delivered the message,
// and for max deliveries has a max_deliver the advisory's count reaches.
// JetStream keeps no delivery count per message once a consumer gave up on
// it, so this is as far as the advisory can be checked; what it rules out
// is an advisory about a consumer or message that never was, or a consumer
// that never gives up.
func (s *Store) confirm(ctx context.Context, ev Event) error {
	cons, err := s.deps.JS.Consumer(ctx, ev.Stream, ev.Consumer)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return &unconfirmedError{fmt.Sprintf("stream %s does not exist", ev.Stream)}
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return &unconfirmedError{fmt.Sprintf("stream %s has no consumer %s", ev.Stream, ev.Consumer)}
	case err != nil:
		return err
	}
	ci := cons.CachedInfo()
	if ci.Delivered.Stream < ev.Seq {
		return &unconfirmedError{fmt.Sprintf("consumer %s of stream %s has delivered up to message %d, not %d",
			ev.Consumer, ev.Stream, ci.Delivered.Stream, ev.Seq)}
	}
	if ev.Reason == semaq.DLQReasonMaxDeliveries {
		if md := ci.Config.MaxDeliver; md <= 0 || ev.Deliveries < uint64(md) {
			return &unconfirmedError{fmt.Sprintf("consumer %s of stream %s has max_deliver %d, the advisory claims %d deliveries",
				ev.Consumer, ev.Stream, md, ev.Deliveries)}
		}
	}
	return nil
}

// refuse counts and logs (at most once a second per reason) an advisory
// not acted on.
func (s *Store) refuse(reason, msg string, args ...any) {
	s.deps.OnRefused(reason)
	if s.refusals.Open(reason) {
		s.log.Warn("dead-letter advisory refused: "+msg, args...)
	}
}

// deadLetter stores the dead letter of ev in SQ_DLQ and returns the ack (its
// Duplicate is set when it was there already). A message no longer in its
// stream is dead-lettered without payload, saying so. With moveFromWorkqueue,
// a max-deliveries message of a workqueue stream is then deleted from it:
// JetStream leaves it there, where no consumer will ever get it again, and
// the dead letter now holds it.
func (s *Store) deadLetter(ctx context.Context, ev Event, moveFromWorkqueue bool) (*jetstream.PubAck, error) {
	if ev.Stream == semaq.DLQStream {
		return nil, errNotSemaqStream
	}
	d := semaq.DeadLetter{
		Stream: ev.Stream, Consumer: ev.Consumer, StreamSeq: ev.Seq,
		Deliveries: ev.Deliveries, Reason: ev.Reason, Time: time.Now(),
	}
	retention := jetstream.LimitsPolicy
	st, err := s.deps.JS.Stream(ctx, ev.Stream)
	switch {
	case err == nil:
		c := st.CachedInfo().Config
		if !s.deps.IsSemaqStream(&c) {
			return nil, errNotSemaqStream
		}
		retention = c.Retention
	case errors.Is(err, jetstream.ErrStreamNotFound):
		d.PayloadLost = fmt.Sprintf("stream %s no longer exists", ev.Stream)
	default:
		return nil, err
	}
	var (
		hdr  nats.Header
		data []byte
	)
	if d.PayloadLost == "" {
		sm, err := jsutil.GetMsg(ctx, s.deps.Conn, ev.Stream, jsutil.MsgQuery{Seq: ev.Seq})
		switch {
		case err == nil:
			d.Subject, d.Stored, hdr, data = sm.Subject, sm.Time, sm.Header, sm.Data
		case isMsgNotFound(err):
			d.PayloadLost = fmt.Sprintf("message %d was no longer in stream %s", ev.Seq, ev.Stream)
		default:
			return nil, err
		}
	}
	ack, err := s.Put(ctx, ev, &d, hdr, data)
	if errors.Is(err, nats.ErrMaxPayload) {
		// The payload fitted its stream, but not with the dead-letter
		// headers beside it: keep the record, say what is missing.
		d.PayloadLost = fmt.Sprintf("payload of %d bytes too large to store with its dead-letter headers", len(data))
		ack, err = s.Put(ctx, ev, &d, hdr, nil)
	}
	if err != nil {
		return nil, err
	}
	if moveFromWorkqueue && retention == jetstream.WorkQueuePolicy && d.PayloadLost == "" && ev.Reason == semaq.DLQReasonMaxDeliveries {
		if err := st.DeleteMsg(ctx, ev.Seq); err != nil && !isMsgNotFound(err) {
			s.log.Warn("dead-lettered message left in its workqueue stream", "stream", ev.Stream, "seq", ev.Seq, "err", err)
		}
	}
	if !ack.Duplicate {
		s.deps.OnDeadLetter(ev.Stream, ev.Reason)
		s.log.Info("message dead-lettered", "stream", ev.Stream, "seq", ev.Seq, "consumer", ev.Consumer,
			"reason", ev.Reason, "dlq_seq", ack.Sequence, "payload_lost", d.PayloadLost)
	}
	return ack, nil
}

// Put stores a dead letter in SQ_DLQ under the subject of ev's stream and
// consumer, with d's AI-DLQ-* headers beside the message's own, and returns
// JetStream's ack. Its Nats-Msg-Id is ev's key, so storing the same dead
// letter twice within the dedup window stores it once (the ack's Duplicate
// says so). The dispatcher's dead letters come this way.
func (s *Store) Put(ctx context.Context, ev Event, d *semaq.DeadLetter, hdr nats.Header, data []byte) (*jetstream.PubAck, error) {
	m := &nats.Msg{
		Subject: semaq.DLQSubject(ev.Stream, ev.Consumer),
		Header:  nats.Header(semaq.DeadLetterHeader(hdr, d)),
		Data:    data,
	}
	m.Header.Set(jetstream.MsgIDHeader, ev.key())
	return s.deps.JS.PublishMsg(ctx, m)
}

// jsAPI sends a request to JetStream's API; an error reply comes back as a
// *jetstream.APIError.
func (s *Store) jsAPI(ctx context.Context, subj string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m, err := s.deps.Conn.RequestWithContext(ctx, subj, body)
	if err != nil {
		return err
	}
	var reply struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		return fmt.Errorf("%s: reply is not JSON: %w", subj, err)
	}
	if reply.Error != nil {
		return reply.Error
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(m.Data, out)
}

func isMsgNotFound(err error) bool {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true
	}
	var ae *jetstream.APIError
	return errors.As(err, &ae) && ae.ErrorCode == jetstream.JSErrCodeMessageNotFound
}
