package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// The dead-letter queue. JetStream gives up on a message that exceeds its
// consumer's MaxDeliver, or that the consumer terminates, and only says so in
// an advisory (nats-server#5049). The broker follows those advisories and
// copies each such message, payload and headers, into the stream SQ_DLQ on
// $SQ.dlq.<stream>.<consumer>, with AI-DLQ-* headers saying why. Replay
// sends it back through the ingress to its public subject.
//
// One node handles each advisory (queue group semaq.dlq). A dead letter's
// Nats-Msg-Id is "<stream>:<seq>:<consumer>", so a repeated advisory, or the
// advisory that follows a capture (DLQCaptureRequest), stores nothing new.
const (
	dlqQueueGroup = "semaq.dlq"
	// dlqMaxAge is how long a dead letter is kept.
	dlqMaxAge = 14 * 24 * time.Hour
	// dlqDuplicates is SQ_DLQ's dedup window: the same dead letter reported
	// twice within it is stored once.
	dlqDuplicates = time.Hour
	// dlqListDefault and dlqListMax bound one list reply.
	dlqListDefault = 100
	dlqListMax     = 1000
	// dlqReplayBudget bounds one replay-all request, well inside the SDK's
	// default timeout; the caller asks again for the rest.
	dlqReplayBudget = 3 * time.Second
	// dlqReasonMax bounds a termination reason copied into a header.
	dlqReasonMax = 1024
	// dlqMaxMsgIDLen is the longest Nats-Msg-Id the ingress takes.
	dlqMaxMsgIDLen = semaq.MaxEnvelopeValue
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

// dlqStreamConfig is SQ_DLQ. It is not a SemaQ stream (no semaq.version
// metadata): the ingress does not serve it and stream ls does not show it.
func dlqStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        semaq.DLQStream,
		Description: "SemaQ dead letters: messages consumers gave up on, with payload, headers and reason",
		Subjects:    []string{semaq.DLQPrefix + ">"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      dlqMaxAge,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		Duplicates:  dlqDuplicates,
		Replicas:    1,
		// Readers may fetch a dead letter too large for a JSON reply
		// straight from the stream (the SDK does).
		AllowDirect: true,
	}
}

// startDLQ makes sure SQ_DLQ exists and follows the advisories. The API
// handlers are served by startAPI (dlqHandlers).
func (s *Server) startDLQ(ctx context.Context) error {
	if _, err := s.js.CreateOrUpdateStream(ctx, dlqStreamConfig()); err != nil {
		return fmt.Errorf("broker: dead-letter stream %s: %w", semaq.DLQStream, err)
	}
	for _, prefix := range []string{advisoryMaxDeliveries, advisoryTerminated} {
		sub, err := s.nc.QueueSubscribe(prefix+".>", dlqQueueGroup, s.onDLQAdvisory)
		if err != nil {
			return fmt.Errorf("broker: dead-letter advisories: %w", err)
		}
		// Past these limits NATS would drop advisories, and with them dead
		// letters; a burst of failures must queue instead.
		if err := sub.SetPendingLimits(ingressPendingMsgs, ingressPendingBytes); err != nil {
			return fmt.Errorf("broker: dead-letter advisories: %w", err)
		}
		s.apiSubs = append(s.apiSubs, sub)
	}
	return nil
}

// dlqHandlers serves the dead-letter API on $SQ.API.DLQ.*.
func (s *Server) dlqHandlers() map[string]nats.MsgHandler {
	return map[string]nats.MsgHandler{
		semaq.APIDLQList:    dlqOp(s, "list", s.dlqList),
		semaq.APIDLQGet:     dlqOp(s, "get", s.dlqGet),
		semaq.APIDLQReplay:  dlqOp(s, "replay", s.dlqReplay),
		semaq.APIDLQPurge:   dlqOp(s, "purge", s.dlqPurge),
		semaq.APIDLQCapture: dlqOp(s, "capture", s.dlqCapture),
	}
}

// dlqEvent is one message a consumer gave up on.
type dlqEvent struct {
	stream, consumer string
	seq, deliveries  uint64
	reason           string // max_deliveries, terminated or "terminated: <why>"
}

// key identifies the dead letter of ev: its Nats-Msg-Id in SQ_DLQ.
func (ev *dlqEvent) key() string {
	return ev.stream + ":" + strconv.FormatUint(ev.seq, 10) + ":" + ev.consumer
}

// dlqAdvisory holds the fields SemaQ reads from JetStream's max-deliveries
// and terminated advisories.
type dlqAdvisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
	Reason     string `json:"reason"`
}

func parseDLQAdvisory(data []byte) (dlqEvent, error) {
	var a dlqAdvisory
	if err := json.Unmarshal(data, &a); err != nil {
		return dlqEvent{}, fmt.Errorf("advisory is not JSON: %w", err)
	}
	ev := dlqEvent{stream: a.Stream, consumer: a.Consumer, seq: a.StreamSeq, deliveries: a.Deliveries}
	switch a.Type {
	case server.JSConsumerDeliveryExceededAdvisoryType:
		ev.reason = semaq.DLQReasonMaxDeliveries
	case server.JSConsumerDeliveryTerminatedAdvisoryType:
		ev.reason = termReason(a.Reason)
	default:
		return ev, fmt.Errorf("advisory type %q is neither max deliveries nor terminated", a.Type)
	}
	return ev, ev.check()
}

// check refuses events whose names cannot form the dead letter's subject.
func (ev *dlqEvent) check() error {
	if err := semaq.CheckStreamName(ev.stream); err != nil {
		return err
	}
	if err := semaq.CheckConsumerName(ev.consumer); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	if ev.seq == 0 {
		return errors.New("stream sequence 0")
	}
	return nil
}

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
	if len(why) > dlqReasonMax {
		n := dlqReasonMax
		for n > 0 && !utf8.RuneStart(why[n]) {
			n--
		}
		why = why[:n]
	}
	return semaq.DLQReasonTerminated + ": " + why
}

// onDLQAdvisory dead-letters the message an advisory reports. A failure is
// retried briefly and then logged with everything needed to find the
// message by hand: it is never dropped without a word.
func (s *Server) onDLQAdvisory(m *nats.Msg) {
	ev, err := parseDLQAdvisory(m.Data)
	if err != nil {
		s.log.Warn("dead-letter advisory ignored", "subject", m.Subject, "err", err)
		return
	}
	if ev.stream == semaq.DLQStream {
		return // a dead letter's own consumer gave up on it; it stays where it is
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		_, err = s.deadLetter(ctx, ev, true)
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, errNotSemaqStream):
			s.log.Debug("advisory of a stream SemaQ does not manage", "subject", m.Subject)
			return
		case attempt < 3 && !s.nc.IsDraining() && !s.nc.IsClosed():
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond) // back off before a retry
			continue
		}
		s.log.Error("message could not be dead-lettered", "stream", ev.stream, "seq", ev.seq,
			"consumer", ev.consumer, "reason", ev.reason, "err", err)
		return
	}
}

// deadLetter stores the dead letter of ev in SQ_DLQ and returns the ack (its
// Duplicate is set when it was there already). A message no longer in its
// stream is dead-lettered without payload, saying so. With moveFromWorkqueue,
// a max-deliveries message of a workqueue stream is then deleted from it:
// JetStream leaves it there, where no consumer will ever get it again, and
// the dead letter now holds it.
func (s *Server) deadLetter(ctx context.Context, ev dlqEvent, moveFromWorkqueue bool) (*jetstream.PubAck, error) {
	if ev.stream == semaq.DLQStream {
		return nil, errNotSemaqStream
	}
	d := semaq.DeadLetter{
		Stream: ev.stream, Consumer: ev.consumer, StreamSeq: ev.seq,
		Deliveries: ev.deliveries, Reason: ev.reason, Time: time.Now(),
	}
	retention := jetstream.LimitsPolicy
	st, err := s.js.Stream(ctx, ev.stream)
	switch {
	case err == nil:
		c := st.CachedInfo().Config
		if !isSemaqStream(&c) {
			return nil, errNotSemaqStream
		}
		retention = c.Retention
	case errors.Is(err, jetstream.ErrStreamNotFound):
		d.PayloadLost = fmt.Sprintf("stream %s no longer exists", ev.stream)
	default:
		return nil, err
	}
	var (
		hdr  nats.Header
		data []byte
	)
	if d.PayloadLost == "" {
		sm, h, err := s.storedMsg(ctx, ev.stream, ev.seq)
		switch {
		case err == nil:
			d.Subject, d.Stored, hdr, data = sm.Subject, sm.Time, h, sm.Data
		case isMsgNotFound(err):
			d.PayloadLost = fmt.Sprintf("message %d was no longer in stream %s", ev.seq, ev.stream)
		default:
			return nil, err
		}
	}
	ack, err := s.storeDeadLetter(ctx, ev, &d, hdr, data)
	if errors.Is(err, nats.ErrMaxPayload) {
		// The payload fitted its stream, but not with the dead-letter
		// headers beside it: keep the record, say what is missing.
		d.PayloadLost = fmt.Sprintf("payload of %d bytes too large to store with its dead-letter headers", len(data))
		ack, err = s.storeDeadLetter(ctx, ev, &d, hdr, nil)
	}
	if err != nil {
		return nil, err
	}
	if moveFromWorkqueue && retention == jetstream.WorkQueuePolicy && d.PayloadLost == "" && ev.reason == semaq.DLQReasonMaxDeliveries {
		if err := st.DeleteMsg(ctx, ev.seq); err != nil && !isMsgNotFound(err) {
			s.log.Warn("dead-lettered message left in its workqueue stream", "stream", ev.stream, "seq", ev.seq, "err", err)
		}
	}
	if !ack.Duplicate {
		s.metrics.DeadLetter(ev.stream, ev.reason)
		s.log.Info("message dead-lettered", "stream", ev.stream, "seq", ev.seq, "consumer", ev.consumer,
			"reason", ev.reason, "dlq_seq", ack.Sequence, "payload_lost", d.PayloadLost)
	}
	return ack, nil
}

func (s *Server) storeDeadLetter(ctx context.Context, ev dlqEvent, d *semaq.DeadLetter, hdr nats.Header, data []byte) (*jetstream.PubAck, error) {
	m := &nats.Msg{
		Subject: semaq.DLQSubject(ev.stream, ev.consumer),
		Header:  nats.Header(semaq.DeadLetterHeader(hdr, d)),
		Data:    data,
	}
	m.Header.Set(jetstream.MsgIDHeader, ev.key())
	return s.js.PublishMsg(ctx, m)
}

// storedMessage is a message as JetStream's STREAM.MSG.GET returns it: the
// stored headers only, none of those a direct get adds.
type storedMessage struct {
	Subject string    `json:"subject"`
	Seq     uint64    `json:"seq"`
	Header  []byte    `json:"hdrs,omitempty"`
	Data    []byte    `json:"data,omitempty"`
	Time    time.Time `json:"time"`
}

// storedMsg reads message seq of stream from its leader.
func (s *Server) storedMsg(ctx context.Context, stream string, seq uint64) (*storedMessage, nats.Header, error) {
	var resp struct {
		Message *storedMessage `json:"message"`
	}
	req := struct {
		Seq uint64 `json:"seq"`
	}{seq}
	if err := s.jsAPI(ctx, "$JS.API.STREAM.MSG.GET."+stream, req, &resp); err != nil {
		return nil, nil, err
	}
	if resp.Message == nil {
		return nil, nil, fmt.Errorf("stream %s: message %d: empty reply", stream, seq)
	}
	var h nats.Header
	if len(resp.Message.Header) > 0 {
		var err error
		if h, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, nil, fmt.Errorf("stream %s: message %d: headers: %w", stream, seq, err)
		}
	}
	return resp.Message, h, nil
}

// jsAPI sends a request to JetStream's API; an error reply comes back as a
// *jetstream.APIError.
func (s *Server) jsAPI(ctx context.Context, subj string, req, out any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m, err := s.nc.RequestWithContext(ctx, subj, body)
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

// dlqOp adapts one dead-letter operation to a NATS handler: it decodes the
// request (an empty body is the zero request), runs op with a bounded
// context and replies with its result or its error.
func dlqOp[Req any](s *Server, name string, op func(ctx context.Context, req *Req) (any, error)) nats.MsgHandler {
	return api.Op(s.log, "dlq "+name, op, api.Error("dlq "+name))
}

// dlqFilter is the SQ_DLQ subject of the dead letters of stream and
// consumer; empty names match all.
func dlqFilter(stream, consumer string) (string, error) {
	if stream != "" {
		if err := semaq.CheckStreamName(stream); err != nil {
			return "", semaq.NewAPIError(semaq.ErrBadRequest, "dlq: %v", err)
		}
	}
	if consumer != "" {
		if err := semaq.CheckConsumerName(consumer); err != nil {
			return "", semaq.NewAPIError(semaq.ErrBadRequest, "dlq: consumer: %v", err)
		}
	}
	switch {
	case stream == "" && consumer == "":
		return semaq.DLQPrefix + ">", nil
	case stream == "":
		return semaq.DLQSubject("*", consumer), nil
	case consumer == "":
		return semaq.DLQSubject(stream, "*"), nil
	default:
		return semaq.DLQSubject(stream, consumer), nil
	}
}

// dlqItem is one dead letter found by a scan, headers only.
type dlqItem struct {
	seq     uint64
	pending uint64 // dead letters matching the scan after this one
	header  nats.Header
}

// scanDLQ returns up to limit dead letters on filter after sequence after,
// oldest first, with their headers, and how many match in all. It reads them
// with a short-lived consumer that gets headers only.
func (s *Server) scanDLQ(ctx context.Context, filter string, after uint64, limit int) ([]dlqItem, uint64, error) {
	cfg := jetstream.ConsumerConfig{
		FilterSubject:     filter,
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute, // in case the delete below is lost
	}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := s.js.CreateConsumer(ctx, semaq.DLQStream, cfg)
	if err != nil {
		return nil, 0, err
	}
	name := cons.CachedInfo().Name
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), api.Timeout)
		defer cancel()
		_ = s.js.DeleteConsumer(dctx, semaq.DLQStream, name)
	}()
	total := cons.CachedInfo().NumPending
	if total == 0 {
		return nil, 0, nil
	}
	batch, err := cons.FetchNoWait(min(limit, int(min(total, uint64(dlqListMax)))))
	if err != nil {
		return nil, 0, err
	}
	var items []dlqItem
	for jm := range batch.Messages() {
		md, err := jm.Metadata()
		if err != nil {
			return nil, 0, err
		}
		items = append(items, dlqItem{seq: md.Sequence.Stream, pending: md.NumPending, header: jm.Headers()})
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return nil, 0, err
	}
	return items, total, nil
}

func (s *Server) dlqList(ctx context.Context, req *semaq.DLQListRequest) (any, error) {
	filter, err := dlqFilter(req.Stream, req.Consumer)
	if err != nil {
		return nil, err
	}
	limit := req.Limit
	switch {
	case limit < 0:
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq list: limit %d is negative", limit)
	case limit == 0:
		limit = dlqListDefault
	case limit > dlqListMax:
		limit = dlqListMax
	}
	items, total, err := s.scanDLQ(ctx, filter, req.After, limit)
	if err != nil {
		return nil, err
	}
	out := semaq.DLQListResponse{DeadLetters: []semaq.DeadLetter{}, Remaining: total}
	// The reply must fit in one NATS message.
	budget := int(s.nc.MaxPayload()) - 1024
	for _, it := range items {
		d, err := semaq.ParseDeadLetter(it.seq, it.header, nil)
		if err != nil {
			s.log.Warn("skipping a malformed dead letter", "seq", it.seq, "err", err)
			out.Remaining = it.pending
			continue
		}
		d.Size, _ = strconv.Atoi(it.header.Get(natsMsgSizeHeader))
		b, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		if budget -= len(b) + 1; budget < 0 && len(out.DeadLetters) > 0 {
			break
		}
		out.DeadLetters = append(out.DeadLetters, *d)
		out.Remaining = it.pending
	}
	return out, nil
}

// loadDeadLetter reads one dead letter with its payload.
func (s *Server) loadDeadLetter(ctx context.Context, seq uint64) (*semaq.DeadLetter, error) {
	if seq == 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq: a dead letter's seq is required")
	}
	sm, h, err := s.storedMsg(ctx, semaq.DLQStream, seq)
	if isMsgNotFound(err) {
		return nil, semaq.NewAPIError(semaq.ErrDeadLetterNotFound, "dead letter %d not found", seq)
	}
	if err != nil {
		return nil, err
	}
	d, err := semaq.ParseDeadLetter(seq, h, sm.Data)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrDeadLetterNotFound, "%v", err)
	}
	return d, nil
}

func (s *Server) dlqGet(ctx context.Context, req *semaq.DLQGetRequest) (any, error) {
	d, err := s.loadDeadLetter(ctx, req.Seq)
	if err != nil {
		return nil, err
	}
	// base64 makes the payload a third larger; a reply must fit in one
	// NATS message.
	if b, err := json.Marshal(d); err == nil && int64(len(b)) > s.nc.MaxPayload() {
		return nil, semaq.NewAPIError(semaq.ErrTooLarge, "dead letter %d holds %d bytes, too large for a JSON reply; read message %d of stream %s directly",
			req.Seq, d.Size, req.Seq, semaq.DLQStream)
	}
	return d, nil
}

func (s *Server) dlqReplay(ctx context.Context, req *semaq.DLQReplayRequest) (any, error) {
	if !req.All {
		if req.Stream != "" || req.Consumer != "" || req.After != 0 {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq replay: stream, consumer and after go with all")
		}
		if err := semaq.CheckExtendDeadline(req.ExtendDeadline); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq replay: %v", err)
		}
		r, err := s.replayOne(ctx, req.Seq, req.ExtendDeadline)
		if err != nil {
			return nil, err
		}
		return semaq.DLQReplayResponse{Replayed: []semaq.DLQReplayed{*r}}, nil
	}
	if req.Seq != 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq replay: give a seq or all, not both")
	}
	if req.Stream == "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq replay: replaying all needs a stream")
	}
	if err := semaq.CheckExtendDeadline(req.ExtendDeadline); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq replay: %v", err)
	}
	filter, err := dlqFilter(req.Stream, req.Consumer)
	if err != nil {
		return nil, err
	}
	items, total, err := s.scanDLQ(ctx, filter, req.After, dlqListDefault)
	if err != nil {
		return nil, err
	}
	out := semaq.DLQReplayResponse{Replayed: []semaq.DLQReplayed{}, Last: req.After, Remaining: total}
	deadline := time.Now().Add(dlqReplayBudget)
	for _, it := range items {
		if time.Now().After(deadline) {
			break
		}
		r, err := s.replayOne(ctx, it.seq, req.ExtendDeadline)
		switch {
		case err == nil:
			out.Replayed = append(out.Replayed, *r)
		case errors.Is(err, semaq.ErrDeadLetterNotFound):
			// replayed or purged meanwhile
		case ctx.Err() != nil:
			return nil, err
		default:
			out.Skipped = append(out.Skipped, semaq.DLQSkipped{Seq: it.seq, Reason: err.Error()})
		}
		out.Last, out.Remaining = it.seq, it.pending
	}
	return out, nil
}

// replayOne publishes dead letter seq to its public subject through the
// ingress, waits for the stream's ack and removes the dead letter. A crash
// in between leaves both: replay is at least once, and a second replay
// inside the stream's duplicate window is recognised as one. extend > 0
// gives the message a new deadline, extend from now.
func (s *Server) replayOne(ctx context.Context, seq uint64, extend time.Duration) (*semaq.DLQReplayed, error) {
	d, err := s.loadDeadLetter(ctx, seq)
	if err != nil {
		return nil, err
	}
	if d.PayloadLost != "" || d.Subject == "" {
		return nil, semaq.NewAPIError(semaq.ErrPayloadLost, "dead letter %d has no payload to replay: %s", seq, d.PayloadLost)
	}
	m := nats.NewMsg(d.Subject)
	for k, v := range replayHeader(d.Headers) {
		m.Header[k] = v
	}
	now := time.Now()
	if extend > 0 {
		for k := range m.Header {
			if strings.EqualFold(k, semaq.HdrDeadline) || strings.EqualFold(k, semaq.HdrTimeout) {
				delete(m.Header, k)
			}
		}
		m.Header[semaq.HdrDeadline] = []string{now.Add(extend).UTC().Format(time.RFC3339Nano)}
	}
	// The deadline the ingress will store; an envelope it refuses fails
	// the publish below.
	env, _ := semaq.Parse(m.Header, now)
	m.Header.Set(semaq.HdrMsgID, replayMsgID(d))
	m.Data = d.Data
	resp, err := s.nc.RequestMsgWithContext(ctx, m)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, semaq.NewAPIError(semaq.ErrNoStream, "dead letter %d: no stream captures subject %s any more", seq, d.Subject)
	}
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: publishing to %s: %w", seq, d.Subject, err)
	}
	var ack struct {
		Error *semaq.APIError `json:"error"`
		semaq.PubAck
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return nil, fmt.Errorf("dead letter %d: acknowledgement is not JSON: %w", seq, err)
	}
	if ack.Error != nil {
		return nil, semaq.NewAPIError(ack.Error, "dead letter %d: %s refused it: %s", seq, d.Subject, ack.Error.Description)
	}
	if err := s.deleteDeadLetter(ctx, seq); err != nil && !errors.Is(err, semaq.ErrDeadLetterNotFound) {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "dead letter %d replayed to %s as %s seq %d, but not removed (replaying it again is safe): %v",
			seq, d.Subject, ack.Stream, ack.Sequence, err)
	}
	return &semaq.DLQReplayed{Seq: seq, Subject: d.Subject, Stream: ack.Stream, StreamSeq: ack.Sequence, Duplicate: ack.Duplicate,
		Deadline: env.Deadline, DeadlinePassed: !env.Deadline.IsZero() && !env.Deadline.After(now)}, nil
}

// replayHeader is what a replayed message carries: the original headers,
// less the conditions of the original publish (Nats-Expected-*) and its
// dedup id, which may still be in the stream's window.
func replayHeader(orig map[string][]string) map[string][]string {
	h := make(map[string][]string, len(orig)+1)
	for k, v := range orig {
		lk := strings.ToLower(k)
		if lk == strings.ToLower(semaq.HdrMsgID) || strings.HasPrefix(lk, "nats-expected-") {
			continue
		}
		h[k] = v
	}
	return h
}

// replayMsgID is the dedup id of a replay: the same for every replay of one
// dead letter, distinct from every other message.
func replayMsgID(d *semaq.DeadLetter) string {
	id := "replay:" + d.Stream + ":" + strconv.FormatUint(d.StreamSeq, 10) + ":" + d.Consumer
	if len(id) > dlqMaxMsgIDLen {
		sum := sha256.Sum256([]byte(id))
		id = "replay:" + hex.EncodeToString(sum[:])
	}
	return id
}

// deleteDeadLetter removes dead letter seq.
func (s *Server) deleteDeadLetter(ctx context.Context, seq uint64) error {
	req := struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true}
	err := s.jsAPI(ctx, "$JS.API.STREAM.MSG.DELETE."+semaq.DLQStream, req, nil)
	if err == nil {
		return nil
	}
	// JetStream's codes for a missing message vary by store; look again.
	if _, _, gerr := s.storedMsg(ctx, semaq.DLQStream, seq); isMsgNotFound(gerr) {
		return semaq.NewAPIError(semaq.ErrDeadLetterNotFound, "dead letter %d not found", seq)
	}
	return err
}

func (s *Server) dlqPurge(ctx context.Context, req *semaq.DLQPurgeRequest) (any, error) {
	if req.Seq != 0 {
		if req.Stream != "" || req.Consumer != "" {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq purge: give a seq or a stream and consumer, not both")
		}
		if _, err := s.loadDeadLetter(ctx, req.Seq); err != nil {
			return nil, err
		}
		if err := s.deleteDeadLetter(ctx, req.Seq); err != nil {
			return nil, err
		}
		return semaq.DLQPurgeResponse{Purged: 1}, nil
	}
	filter, err := dlqFilter(req.Stream, req.Consumer)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Purged uint64 `json:"purged"`
	}
	preq := struct {
		Filter string `json:"filter"`
	}{filter}
	if err := s.jsAPI(ctx, "$JS.API.STREAM.PURGE."+semaq.DLQStream, preq, &resp); err != nil {
		return nil, err
	}
	if resp.Purged > 0 {
		s.log.Info("dead letters purged", "filter", filter, "purged", resp.Purged)
	}
	return semaq.DLQPurgeResponse{Purged: resp.Purged}, nil
}

func (s *Server) dlqCapture(ctx context.Context, req *semaq.DLQCaptureRequest) (any, error) {
	ev := dlqEvent{stream: req.Stream, consumer: req.Consumer, seq: req.StreamSeq, deliveries: req.Deliveries, reason: termReason(req.Reason)}
	if err := ev.check(); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq capture: %v", err)
	}
	ack, err := s.deadLetter(ctx, ev, false)
	if errors.Is(err, errNotSemaqStream) {
		return nil, semaq.NewAPIError(semaq.ErrStreamNotFound, "dlq capture: stream %s not found", req.Stream)
	}
	if err != nil {
		return nil, err
	}
	return semaq.DLQCaptureResponse{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}
