package audit

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// maxUserFilter bounds AuditListRequest.User: longer is no user name.
const maxUserFilter = 256

// fetchBatch is how many records one pull of a LIST scan asks for.
const fetchBatch = 256

// opFilter is the SQ_AUDIT subject of the records of op: one operation
// (stream.create) or a family (stream: every stream.* operation).
func opFilter(op string) (string, error) {
	if op == "" {
		return reserved.AuditPrefix + ">", nil
	}
	family := false
	for _, o := range semaq.AuditOps {
		if o == op {
			return reserved.AuditPrefix + op, nil
		}
		family = family || strings.HasPrefix(o, op+".")
	}
	if family {
		return reserved.AuditPrefix + op + ".>", nil
	}
	return "", semaq.NewAPIError(semaq.ErrBadRequest, "audit list: op %q is not an operation (%s) nor a family of them (stream, queue, schema, route, user, key, dlq)",
		op, strings.Join(semaq.AuditOps, ", "))
}

// list reads the records matching req with a short-lived consumer of
// SQ_AUDIT, keeping the newest req.Limit of them that fit in one reply.
func (l *Log) list(ctx context.Context, req *semaq.AuditListRequest) (any, error) {
	limit := req.Limit
	switch {
	case limit < 0:
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "audit list: limit %d is negative", limit)
	case limit == 0:
		limit = semaq.AuditListDefault
	case limit > semaq.AuditListMax:
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "audit list: limit %d is over %d; narrow with since, user or op", limit, semaq.AuditListMax)
	}
	if len(req.User) > maxUserFilter {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "audit list: user filter is %d bytes, over %d", len(req.User), maxUserFilter)
	}
	filter, err := opFilter(req.Op)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		FilterSubject:     filter,
		AckPolicy:         jetstream.AckNonePolicy,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute, // in case the delete below is lost
	}
	older := false // records before where the scan starts exist
	switch {
	case !req.Since.IsZero():
		since := req.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	case req.Op == "" && req.User == "":
		// Every record matches: the newest limit are the last limit
		// sequences, so the scan reads only those.
		st, err := l.deps.JS.Stream(ctx, reserved.AuditStream)
		if err != nil {
			return nil, api.JSError(err, "audit list")
		}
		state := st.CachedInfo().State
		if state.LastSeq >= uint64(limit) && state.LastSeq-uint64(limit)+1 > state.FirstSeq {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, state.LastSeq-uint64(limit)+1
			older = true
		}
	}
	cons, err := l.deps.JS.CreateConsumer(ctx, reserved.AuditStream, cfg)
	if err != nil {
		return nil, api.JSError(err, "audit list")
	}
	name := cons.CachedInfo().Name
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), api.Timeout)
		defer cancel()
		_ = l.deps.JS.DeleteConsumer(dctx, reserved.AuditStream, name)
	}()
	w := window{limit: limit, budget: int(l.deps.Conn.MaxPayload()) - 1024, recs: []semaq.AuditRecord{}, more: older}
	// Records stored after the consumer was made are not read: the scan
	// ends at what was there when it began.
	for left := cons.CachedInfo().NumPending; left > 0; {
		batch, err := cons.FetchNoWait(int(min(left, fetchBatch)))
		if err != nil {
			return nil, api.JSError(err, "audit list")
		}
		n := uint64(0)
		for jm := range batch.Messages() {
			n++
			var rec semaq.AuditRecord
			if err := json.Unmarshal(jm.Data(), &rec); err != nil {
				continue // not a record of ours: nobody else can write here
			}
			if req.User != "" && rec.Principal.Name() != req.User {
				continue
			}
			if md, err := jm.Metadata(); err == nil {
				rec.Seq = md.Sequence.Stream
			}
			w.add(rec)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, api.JSError(err, "audit list")
		}
		if n == 0 {
			break
		}
		left -= min(n, left)
	}
	return semaq.AuditListResponse{Records: w.recs, More: w.more}, nil
}

// window keeps the newest records added, at most limit of them and at
// most budget bytes of JSON, oldest first.
type window struct {
	limit, budget int
	recs          []semaq.AuditRecord
	sizes         []int
	bytes         int
	more          bool
}

func (w *window) add(rec semaq.AuditRecord) {
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	w.recs, w.sizes, w.bytes = append(w.recs, rec), append(w.sizes, len(b)+1), w.bytes+len(b)+1
	for len(w.recs) > 0 && (len(w.recs) > w.limit || w.bytes > w.budget) {
		w.bytes -= w.sizes[0]
		w.recs, w.sizes = w.recs[1:], w.sizes[1:]
		w.more = true
	}
}
