package broker

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// The token status API ($SQ.API.TOKENS.STATUS, docs/tokens.md): does the
// broker know a request id's token stream? Request ids are the broker's to
// issue, but clients may also choose them (a queued request's Nats-Msg-Id,
// a writer's first record), so "issued" is whatever the broker holds for
// the id: records in SQ_TOKENS, a claim or job binding in the relay, or a
// queued or held job with that Nats-Msg-Id. A front door asks before it
// opens a reader, so a typo is a 404 rather than a stream that waits
// forever.

// startTokenAPI serves the status API on every node, like the rest of
// $SQ.API (requests and replies on the egress connection).
func (s *Server) startTokenAPI() error {
	sub, err := s.egress.QueueSubscribe(semaq.APITokenStatus, semaq.APIQueueGroup, api.CheckedReply(s.log, s.apiTokenStatus))
	if err != nil {
		return err
	}
	s.apiSubs = append(s.apiSubs, sub)
	return s.egress.Flush()
}

func (s *Server) apiTokenStatus(m *nats.Msg) {
	api.Op(s.log, "token status", func(ctx context.Context, req *semaq.TokenStatusRequest) (any, error) {
		if err := semaq.CheckRequestID(req.ID); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "token status: %v", err)
		}
		return s.tokenStatus(ctx, req.ID)
	}, api.Error("token status"))(m)
}

// tokenStatus looks id up: stored records first (they also say how far the
// stream got), then the relay's claims, then the queues' jobs.
func (s *Server) tokenStatus(ctx context.Context, id string) (*semaq.TokenStatus, error) {
	st := &semaq.TokenStatus{ID: id}
	if s.tokens == nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "token status: token streams are not started")
	}
	for _, subj := range []string{semaq.TokenEndSubject(id), semaq.TokenChunkSubject(id)} {
		m, err := s.tokens.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, api.JSError(err, "token status %s", id)
		}
		st.Known = true
		st.Ended = subj == semaq.TokenEndSubject(id)
		if rec, err := semaq.ParseTokenChunk(m.Data); err == nil {
			st.Records = rec.Seq
		}
		return st, nil
	}
	if known, ended := s.tokens.claimOf(id); known {
		st.Known, st.Ended = true, ended
		return st, nil
	}
	st.Known = s.queuedJob(id)
	return st, nil
}

// queuedJob reports whether a work queue of this node holds a request
// whose Nats-Msg-Id is id (queued, delayed or held). Each dispatcher's mu
// is taken alone, never with queues.mu.
func (s *Server) queuedJob(id string) bool {
	s.queues.mu.Lock()
	ds := make([]*dispatcher, 0, len(s.queues.all))
	for _, d := range s.queues.all {
		ds = append(ds, d)
	}
	s.queues.mu.Unlock()
	for _, d := range ds {
		d.mu.Lock()
		found := d.sched != nil && d.sched.ByID(id) != nil
		d.mu.Unlock()
		if found {
			return true
		}
	}
	return false
}
