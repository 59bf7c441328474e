package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// defaultDeltas is a deltas request's limit when it names none.
const defaultDeltas = 100

// deltasHandler serves $SQ.API.SESSION.DELTAS off the subscription's
// goroutine, since a request may wait for the next delta: each runs on a
// goroutine of the gate, at most MaxWatchers at once; past that a request
// is refused as unavailable (the SDK asks again shortly).
func (s *Store) deltasHandler() nats.MsgHandler {
	serve := api.OpWithin(s.log, "session deltas", semaq.MaxSessionWait+api.Timeout, counted(s, "deltas", s.deltas), nil)
	return func(m *nats.Msg) {
		select {
		case s.watchSlots <- struct{}{}:
		default:
			api.ReplyErr(s.log, m, semaq.NewAPIError(semaq.ErrUnavailable, "session deltas: this node holds %d waiting requests, its bound; ask again", cap(s.watchSlots)))
			return
		}
		s.deps.Metrics.SessionWatchers(1)
		release := func() {
			<-s.watchSlots
			s.deps.Metrics.SessionWatchers(-1)
		}
		if !s.deps.Gate.Go("deltas", func(context.Context) { defer release(); serve(m) }) {
			release()
			api.ReplyErr(s.log, m, semaq.NewAPIError(semaq.ErrUnavailable, "session deltas: the node is closing"))
		}
	}
}

func (s *Store) deltas(ctx context.Context, req *semaq.SessionDeltasRequest) (any, error) {
	k, err := s.ref(ctx, req.SessionRef, read)
	if err != nil {
		return nil, err
	}
	limit := req.Limit
	switch {
	case limit < 0 || req.Wait < 0:
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: limit and wait must not be negative", k.id)
	case req.Wait > semaq.MaxSessionWait:
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: wait %s is over %s", k.id, req.Wait, semaq.MaxSessionWait)
	case limit == 0:
		limit = defaultDeltas
	case limit > semaq.SessionDeltasMax:
		limit = semaq.SessionDeltasMax
	}
	var timeout <-chan time.Time
	if req.Wait > 0 {
		t := time.NewTimer(req.Wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		// Registered before the read: a change stored between the read
		// and the wait still wakes it.
		woken, cancel := s.waitFor(k)
		st, err := s.load(ctx, k)
		if err != nil {
			cancel()
			return nil, err
		}
		if st.doc == nil {
			cancel()
			return nil, notFound(k)
		}
		rev := st.doc.Revision
		if req.After > rev {
			cancel()
			return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: revision %d is past the session's %d", k.id, req.After, rev)
		}
		if req.After < rev {
			cancel()
			ds, err := s.readDeltas(ctx, k, req.After, rev, st.seq, limit)
			if err != nil {
				return nil, err
			}
			return semaq.SessionDeltasResponse{Deltas: ds, Revision: rev}, nil
		}
		if timeout == nil {
			cancel()
			return semaq.SessionDeltasResponse{Deltas: []semaq.SessionDelta{}, Revision: rev}, nil
		}
		select {
		case <-woken:
			cancel()
		case <-timeout:
			cancel()
			return semaq.SessionDeltasResponse{Deltas: []semaq.SessionDelta{}, Revision: rev}, nil
		case <-s.closing:
			cancel()
			return semaq.SessionDeltasResponse{Deltas: []semaq.SessionDelta{}, Revision: rev}, nil
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		}
	}
}

// probe is the first delta of k stored at or after seq.
func (s *Store) probe(ctx context.Context, k key, seq uint64) (*jetstream.RawStreamMsg, uint64, error) {
	m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(k.delta()))
	if err != nil {
		return nil, 0, err
	}
	rev, err := strconv.ParseUint(m.Header.Get(hdrRevision), 10, 64)
	if err != nil {
		return nil, 0, errors.New("session " + k.id + ": a stored delta has no revision")
	}
	return m, rev, nil
}

// readDeltas reads up to limit of k's deltas after revision after, up to
// revision last, whose document is stored at docSeq. Revisions rise with
// sequences, so the first one wanted is found by a binary search on the
// stream's sequence (a few direct gets), then read in order.
func (s *Store) readDeltas(ctx context.Context, k key, after, last, docSeq uint64, limit int) ([]semaq.SessionDelta, error) {
	want := after + 1
	first, rev, err := s.probe(ctx, k, 1)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, notFound(k) // deleted since its document was read
	}
	if err != nil {
		return nil, err
	}
	if rev > want {
		return nil, semaq.NewAPIError(semaq.ErrSessionRevisionGone, "session %s: the deltas after revision %d are no longer kept; the oldest kept is %d: get the session and watch from its revision",
			k.id, after, rev)
	}
	start := first
	if rev < want {
		// lo holds a delta before want; every delta from hi on is at or
		// after want (the document's sequence is past the last delta).
		lo, hi := first.Sequence, docSeq
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			m, r, err := s.probe(ctx, k, mid)
			if err != nil {
				return nil, err
			}
			if r >= want {
				hi = mid
			} else {
				lo = m.Sequence
			}
		}
		if start, _, err = s.probe(ctx, k, lo+1); err != nil {
			return nil, err
		}
	}
	out := []semaq.SessionDelta{}
	for m := start; ; {
		var d semaq.SessionDelta
		if err := json.Unmarshal(m.Data, &d); err != nil {
			return nil, errors.New("session " + k.id + ": a stored delta does not decode: " + err.Error())
		}
		if d.Revision > last {
			break
		}
		out = append(out, d)
		if len(out) == limit || d.Revision == last {
			break
		}
		next, _, err := s.probe(ctx, k, m.Sequence+1)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		m = next
	}
	return out, nil
}
