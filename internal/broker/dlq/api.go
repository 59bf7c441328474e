package dlq

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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/semaq"
)

// Handlers serves the dead-letter API on $SQ.API.DLQ.*.
func (s *Store) Handlers() api.Handlers {
	return api.Handlers{
		semaq.APIDLQList:    handler(s, "list", s.list),
		semaq.APIDLQGet:     handler(s, "get", s.get),
		semaq.APIDLQReplay:  handler(s, "replay", s.replay),
		semaq.APIDLQPurge:   handler(s, "purge", s.purge),
		semaq.APIDLQCapture: handler(s, "capture", s.capture),
	}
}

// handler adapts one dead-letter operation to a NATS handler: it decodes the
// request (an empty body is the zero request), runs op with a bounded
// context and replies with its result or its error.
func handler[Req any](s *Store, name string, op func(ctx context.Context, req *Req) (any, error)) nats.MsgHandler {
	return api.Op(s.log, "dlq "+name, op, api.Error("dlq "+name))
}

// auditTarget names the dead letters a purge or replay acts on, for its
// audit record: "seq 42", "ORDERS/billing", "ORDERS", or "*" for all.
func auditTarget(seq uint64, stream, consumer string) string {
	switch {
	case seq != 0:
		return "seq " + strconv.FormatUint(seq, 10)
	case stream == "" && consumer == "":
		return "*"
	case consumer == "":
		return stream
	default:
		return stream + "/" + consumer
	}
}

// subjectFilter is the SQ_DLQ subject of the dead letters of stream and
// consumer; empty names match all.
func subjectFilter(stream, consumer string) (string, error) {
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

// item is one dead letter found by a scan, headers only.
type item struct {
	seq     uint64
	pending uint64 // dead letters matching the scan after this one
	header  nats.Header
}

// scan returns up to limit dead letters on filter after sequence after,
// oldest first, with their headers, and how many match in all. It reads them
// with a short-lived consumer that gets headers only.
func (s *Store) scan(ctx context.Context, filter string, after uint64, limit int) ([]item, uint64, error) {
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
	cons, err := s.deps.JS.CreateConsumer(ctx, semaq.DLQStream, cfg)
	if err != nil {
		return nil, 0, err
	}
	name := cons.CachedInfo().Name
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), api.Timeout)
		defer cancel()
		_ = s.deps.JS.DeleteConsumer(dctx, semaq.DLQStream, name)
	}()
	total := cons.CachedInfo().NumPending
	if total == 0 {
		return nil, 0, nil
	}
	batch, err := cons.FetchNoWait(min(limit, int(min(total, uint64(listMax)))))
	if err != nil {
		return nil, 0, err
	}
	var items []item
	for jm := range batch.Messages() {
		md, err := jm.Metadata()
		if err != nil {
			return nil, 0, err
		}
		items = append(items, item{seq: md.Sequence.Stream, pending: md.NumPending, header: jm.Headers()})
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return nil, 0, err
	}
	return items, total, nil
}

func (s *Store) list(ctx context.Context, req *semaq.DLQListRequest) (any, error) {
	filter, err := subjectFilter(req.Stream, req.Consumer)
	if err != nil {
		return nil, err
	}
	limit := req.Limit
	switch {
	case limit < 0:
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq list: limit %d is negative", limit)
	case limit == 0:
		limit = listDefault
	case limit > listMax:
		limit = listMax
	}
	items, total, err := s.scan(ctx, filter, req.After, limit)
	if err != nil {
		return nil, err
	}
	out := semaq.DLQListResponse{DeadLetters: []semaq.DeadLetter{}, Remaining: total}
	// The reply must fit in one NATS message.
	budget := int(s.deps.Conn.MaxPayload()) - 1024
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
func (s *Store) loadDeadLetter(ctx context.Context, seq uint64) (*semaq.DeadLetter, error) {
	if seq == 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "dlq: a dead letter's seq is required")
	}
	sm, err := jsutil.GetMsg(ctx, s.deps.Conn, semaq.DLQStream, jsutil.MsgQuery{Seq: seq})
	if isMsgNotFound(err) {
		return nil, semaq.NewAPIError(semaq.ErrDeadLetterNotFound, "dead letter %d not found", seq)
	}
	if err != nil {
		return nil, err
	}
	d, err := semaq.ParseDeadLetter(seq, sm.Header, sm.Data)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrDeadLetterNotFound, "%v", err)
	}
	return d, nil
}

func (s *Store) get(ctx context.Context, req *semaq.DLQGetRequest) (any, error) {
	d, err := s.loadDeadLetter(ctx, req.Seq)
	if err != nil {
		return nil, err
	}
	// base64 makes the payload a third larger; a reply must fit in one
	// NATS message.
	if b, err := json.Marshal(d); err == nil && int64(len(b)) > s.deps.Conn.MaxPayload() {
		return nil, semaq.NewAPIError(semaq.ErrTooLarge, "dead letter %d holds %d bytes, too large for a JSON reply; read message %d of stream %s directly",
			req.Seq, d.Size, req.Seq, semaq.DLQStream)
	}
	return d, nil
}

func (s *Store) replay(ctx context.Context, req *semaq.DLQReplayRequest) (res any, err error) {
	defer s.deps.Audit(ctx, semaq.AuditOpDLQReplay, auditTarget(req.Seq, req.Stream, req.Consumer))(&res, &err)
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
	filter, err := subjectFilter(req.Stream, req.Consumer)
	if err != nil {
		return nil, err
	}
	items, total, err := s.scan(ctx, filter, req.After, listDefault)
	if err != nil {
		return nil, err
	}
	out := semaq.DLQReplayResponse{Replayed: []semaq.DLQReplayed{}, Last: req.After, Remaining: total}
	deadline := time.Now().Add(replayBudget)
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
func (s *Store) replayOne(ctx context.Context, seq uint64, extend time.Duration) (*semaq.DLQReplayed, error) {
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
	resp, err := s.deps.Conn.RequestMsgWithContext(ctx, m)
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
// dedup id, which may still be in the stream's window. A request the
// model registry bound is bound again (docs/models.md): its version and
// revision go.
func replayHeader(orig map[string][]string) map[string][]string {
	h := make(map[string][]string, len(orig)+1)
	bound := len(orig[semaq.HdrModelRevision]) > 0
	for k, v := range orig {
		lk := strings.ToLower(k)
		if lk == strings.ToLower(semaq.HdrMsgID) || strings.HasPrefix(lk, "nats-expected-") {
			continue
		}
		if bound && (lk == strings.ToLower(semaq.HdrModelRevision) || lk == strings.ToLower(semaq.HdrModelVersion)) {
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
	if len(id) > maxMsgIDLen {
		sum := sha256.Sum256([]byte(id))
		id = "replay:" + hex.EncodeToString(sum[:])
	}
	return id
}

// deleteDeadLetter removes dead letter seq.
func (s *Store) deleteDeadLetter(ctx context.Context, seq uint64) error {
	req := struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true}
	err := s.jsAPI(ctx, "$JS.API.STREAM.MSG.DELETE."+semaq.DLQStream, req, nil)
	if err == nil {
		return nil
	}
	// JetStream's codes for a missing message vary by store; look again.
	if _, gerr := jsutil.GetMsg(ctx, s.deps.Conn, semaq.DLQStream, jsutil.MsgQuery{Seq: seq}); isMsgNotFound(gerr) {
		return semaq.NewAPIError(semaq.ErrDeadLetterNotFound, "dead letter %d not found", seq)
	}
	return err
}

func (s *Store) purge(ctx context.Context, req *semaq.DLQPurgeRequest) (out any, err error) {
	defer s.deps.Audit(ctx, semaq.AuditOpDLQPurge, auditTarget(req.Seq, req.Stream, req.Consumer))(&out, &err)
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
	filter, err := subjectFilter(req.Stream, req.Consumer)
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

func (s *Store) capture(ctx context.Context, req *semaq.DLQCaptureRequest) (any, error) {
	ev := Event{Stream: req.Stream, Consumer: req.Consumer, Seq: req.StreamSeq, Deliveries: req.Deliveries, Reason: termReason(req.Reason)}
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
