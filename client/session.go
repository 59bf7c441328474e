package client

import (
	"context"
	"errors"
	"time"

	"github.com/semaq/semaq/semaq"
)

// Sessions (docs/sessions.md): conversation state the broker keeps, with
// compare-and-set on a revision, deltas from any kept revision, rounds
// and a freshness state. With auth on, a user reaches its own tenant's
// sessions only; admins, services and workers name the tenant in the
// request's SessionRef.

// Rev is a revision to compare-and-set on, for a request's Revision
// field: the change is refused with semaq.ErrSessionConflict unless the
// session is at rev (Rev(0): unless it does not exist yet).
func Rev(rev uint64) *uint64 { return &rev }

// PutSession creates a session or replaces its data (and its settings,
// when r.Settings is set).
func (c *Client) PutSession(ctx context.Context, r semaq.SessionPutRequest) (*semaq.SessionInfo, error) {
	var info semaq.SessionInfo
	if err := c.request(ctx, semaq.APISessionPut, r, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// PatchSession applies a JSON merge patch (RFC 7396) to a session's data
// and returns the session at its new revision.
func (c *Client) PatchSession(ctx context.Context, r semaq.SessionPatchRequest) (*semaq.SessionInfo, error) {
	var info semaq.SessionInfo
	if err := c.request(ctx, semaq.APISessionPatch, r, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// GetSession reads a session with its last rounds rounds (-1: all).
func (c *Client) GetSession(ctx context.Context, ref semaq.SessionRef, rounds int) (*semaq.Session, error) {
	var s semaq.Session
	if err := c.request(ctx, semaq.APISessionGet, semaq.SessionGetRequest{SessionRef: ref, Rounds: rounds}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSession deletes a session with its deltas.
func (c *Client) DeleteSession(ctx context.Context, ref semaq.SessionRef) error {
	return c.request(ctx, semaq.APISessionDelete, ref, nil)
}

// Sessions lists a page of sessions by ID.
func (c *Client) Sessions(ctx context.Context, r semaq.SessionListRequest) (*semaq.SessionListResponse, error) {
	var resp semaq.SessionListResponse
	if err := c.request(ctx, semaq.APISessionList, r, &resp); err != nil {
		return nil, err
	}
	if resp.Sessions == nil {
		resp.Sessions = []semaq.SessionInfo{}
	}
	return &resp, nil
}

// AddRound adds a round to a session's conversation.
func (c *Client) AddRound(ctx context.Context, r semaq.SessionRoundAddRequest) (*semaq.SessionInfo, error) {
	var info semaq.SessionInfo
	if err := c.request(ctx, semaq.APISessionRoundAdd, r, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// SessionRounds reads rounds: the last r.Last, or the one numbered
// r.Round.
func (c *Client) SessionRounds(ctx context.Context, r semaq.SessionRoundsRequest) (*semaq.SessionRoundsResponse, error) {
	var resp semaq.SessionRoundsResponse
	if err := c.request(ctx, semaq.APISessionRounds, r, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// TrimSession drops the rounds numbered below r.BeforeRound.
func (c *Client) TrimSession(ctx context.Context, r semaq.SessionTrimRequest) (*semaq.SessionInfo, error) {
	var info semaq.SessionInfo
	if err := c.request(ctx, semaq.APISessionTrim, r, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ReportSession reports the confidence (0 to 1) of a result made with
// the session's context: a streak of low ones degrades the session.
func (c *Client) ReportSession(ctx context.Context, ref semaq.SessionRef, confidence float64) (*semaq.SessionInfo, error) {
	var info semaq.SessionInfo
	if err := c.request(ctx, semaq.APISessionReport, semaq.SessionReportRequest{SessionRef: ref, Confidence: confidence}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// MoveSessionDependency says a dependency is now at another version: the
// tenant's sessions that declared another version of it are degraded. It
// returns how many were.
func (c *Client) MoveSessionDependency(ctx context.Context, r semaq.SessionDependencyRequest) (int, error) {
	var resp semaq.SessionDependencyResponse
	if err := c.request(ctx, semaq.APISessionDepend, r, &resp); err != nil {
		return 0, err
	}
	return resp.Degraded, nil
}

// SessionDeltas reads a session's deltas after revision r.After; with
// r.Wait it waits that long for one when there is none yet.
func (c *Client) SessionDeltas(ctx context.Context, r semaq.SessionDeltasRequest) (*semaq.SessionDeltasResponse, error) {
	if r.Wait > 0 {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, r.Wait+c.timeout)
			defer cancel()
		}
	}
	var resp semaq.SessionDeltasResponse
	if err := c.request(ctx, semaq.APISessionDeltas, r, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// watchWait is how long one request of a SessionWatch waits for a delta.
const watchWait = 20 * time.Second

// SessionWatch reads a session's deltas in revision order: the kept ones
// from a revision, then the live ones as they are made. It holds no
// subscription: each Next that has nothing buffered asks the broker, which
// answers at once when there are deltas and otherwise waits for the next.
// So a watch survives a reconnect, or a broker node's loss, without a
// gap: it resumes after the last revision it returned. Not safe for
// concurrent use.
type SessionWatch struct {
	c    *Client
	ref  semaq.SessionRef
	last uint64
	buf  []semaq.SessionDelta
}

// WatchSession watches ref's deltas from revision from on (from 0 or 1:
// every delta kept).
func (c *Client) WatchSession(ref semaq.SessionRef, from uint64) *SessionWatch {
	return &SessionWatch{c: c, ref: ref, last: max(from, 1) - 1}
}

// Revision is the revision of the last delta Next returned.
func (w *SessionWatch) Revision() uint64 { return w.last }

// Next returns the next delta, waiting for it until ctx is done. A
// session deleted or expired meanwhile ends the watch with
// semaq.ErrSessionNotFound; deltas no longer kept with
// semaq.ErrSessionRevisionGone.
func (w *SessionWatch) Next(ctx context.Context) (semaq.SessionDelta, error) {
	for len(w.buf) == 0 {
		wait := watchWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)-w.c.timeout/2)
		}
		if wait < 0 {
			wait = 0
		}
		resp, err := w.c.SessionDeltas(ctx, semaq.SessionDeltasRequest{SessionRef: w.ref, After: w.last, Wait: wait})
		if err != nil {
			if ctx.Err() != nil {
				return semaq.SessionDelta{}, ctx.Err()
			}
			if errors.Is(err, semaq.ErrUnavailable) {
				// A node went away mid-wait: ask again, from the same
				// revision, once the cluster had a moment.
				t := time.NewTimer(250 * time.Millisecond)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return semaq.SessionDelta{}, ctx.Err()
				}
				continue
			}
			return semaq.SessionDelta{}, err
		}
		if len(resp.Deltas) == 0 && wait == 0 {
			<-ctx.Done()
			return semaq.SessionDelta{}, ctx.Err()
		}
		w.buf = resp.Deltas
	}
	d := w.buf[0]
	w.buf = w.buf[1:]
	w.last = d.Revision
	return d, nil
}
