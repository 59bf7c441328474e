package tokens

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// The token status API ($SQ.API.TOKENS.STATUS, docs/tokens.md): does the
// broker know a request id's token stream? Request ids are the broker's to
// issue, but clients may also choose them (a queued request's Nats-Msg-Id,
// a writer's first record), so "issued" is whatever the broker holds for
// the id: records in SQ_TOKENS, a claim or job binding in the relay, or a
// queued or held job with that Nats-Msg-Id (Deps.QueuedJob). A front door
// asks before it opens a reader, so a typo is a 404 rather than a stream
// that waits forever. A caller of one tenant learns only of its tenant's
// streams: another tenant's id is unknown to it, as it is to its reads.

// Handlers is the store's part of $SQ.API. The node serves it on every
// node, like the rest of $SQ.API (requests and replies on the egress
// connection, each request's reply subject checked first).
func (ts *Store) Handlers() api.Handlers {
	return api.Handlers{
		semaq.APITokenStatus: api.Op(ts.log, "token status", func(ctx context.Context, req *semaq.TokenStatusRequest) (any, error) {
			if err := semaq.CheckRequestID(req.ID); err != nil {
				return nil, semaq.NewAPIError(semaq.ErrBadRequest, "token status: %v", err)
			}
			tenant := semaq.TokenAnyTenant
			if ts.sender != nil {
				// A worker without a tenant serves every tenant's jobs: it
				// asks how far a redelivered job's stream got.
				if s := ts.sender(api.RequestHeader(ctx)); !s.AnyTenant && !(s.Worker && s.Tenant == "") {
					tenant = semaq.TokenTenant(s.Tenant)
				}
			}
			return ts.status(ctx, req.ID, tenant)
		}, api.Error("token status")),
	}
}

// status looks id up for a caller reading tenant's streams (a tenant token,
// or semaq.TokenAnyTenant): stored records first (they also say how far
// the stream got), then the relay's claims, then the queues' jobs.
func (ts *Store) status(ctx context.Context, id, tenant string) (*semaq.TokenStatus, error) {
	st := &semaq.TokenStatus{ID: id}
	if ts.stream == nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "token status: token streams are not started")
	}
	// The last record of the stream is its highest: the terminal one once
	// it has ended.
	m, err := ts.stream.GetLastMsgForSubject(ctx, semaq.TokenSubjectFilter(tenant, id))
	switch {
	case err == nil:
		st.Known = true
		_, _, st.Ended, _ = semaq.ParseTokenSubject(m.Subject)
		if rec, err := semaq.ParseTokenChunk(m.Data); err == nil {
			st.Records, st.Offset, st.Final = rec.Seq, rec.Offset+uint64(rec.N), rec.Final != nil
		}
		return st, nil
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, api.JSError(err, "token status %s", id)
	}
	mine := func(t string) bool { return tenant == semaq.TokenAnyTenant || t == tenant }
	if t, known, ended := ts.claimOf(id); known && mine(t) {
		st.Known, st.Ended = true, ended
		return st, nil
	}
	if ts.queuedJob != nil {
		t, ok := ts.queuedJob(id)
		st.Known = ok && mine(semaq.TokenTenant(t))
	}
	return st, nil
}
