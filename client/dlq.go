package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

// DeadLetterFilter selects dead letters. Empty Stream and Consumer match all.
type DeadLetterFilter struct {
	Stream   string
	Consumer string
	// After skips dead letters up to and including this sequence.
	After uint64
	// Limit is the most returned; 0 means 100.
	Limit int
}

// DeadLetters lists dead letters oldest first, without their payloads (see
// DeadLetter). Messages land in the dead-letter queue when they exceed their
// consumer's max deliveries or a consumer terminates them.
func (c *Client) DeadLetters(ctx context.Context, f DeadLetterFilter) ([]semaq.DeadLetter, error) {
	if f.Limit < 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: DeadLetters: limit %d is negative", f.Limit)
	}
	limit := f.Limit
	if limit == 0 {
		limit = 100
	}
	out := []semaq.DeadLetter{}
	after := f.After
	for len(out) < limit {
		var resp semaq.DLQListResponse
		req := semaq.DLQListRequest{Stream: f.Stream, Consumer: f.Consumer, After: after, Limit: limit - len(out)}
		if err := c.request(ctx, semaq.APIDLQList, req, &resp); err != nil {
			return nil, err
		}
		out = append(out, resp.DeadLetters...)
		if resp.Remaining == 0 || len(resp.DeadLetters) == 0 {
			break
		}
		after = resp.DeadLetters[len(resp.DeadLetters)-1].Seq
	}
	return out, nil
}

// DeadLetter returns one dead letter with its payload;
// semaq.ErrDeadLetterNotFound if there is none with that sequence.
func (c *Client) DeadLetter(ctx context.Context, seq uint64) (*semaq.DeadLetter, error) {
	var d semaq.DeadLetter
	err := c.request(ctx, semaq.APIDLQGet, semaq.DLQGetRequest{Seq: seq}, &d)
	if errors.Is(err, semaq.ErrTooLarge) {
		// Too large for a JSON reply: read it from the stream itself.
		return c.deadLetterDirect(ctx, seq)
	}
	if err != nil {
		return nil, err
	}
	return &d, nil
}

func (c *Client) deadLetterDirect(ctx context.Context, seq uint64) (*semaq.DeadLetter, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	st, err := c.js.Stream(ctx, semaq.DLQStream)
	if err != nil {
		return nil, fmt.Errorf("client: dead-letter stream: %w", err)
	}
	m, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, semaq.NewAPIError(semaq.ErrDeadLetterNotFound, "dead letter %d not found", seq)
	}
	if err != nil {
		return nil, fmt.Errorf("client: dead letter %d: %w", seq, err)
	}
	return semaq.ParseDeadLetter(seq, m.Header, m.Data)
}

// Replay sends dead letter seq back to its original subject through the
// broker's ingress, with its original headers, and removes it from the
// queue once the stream has stored it. The replayed message's Nats-Msg-Id is
// "replay:<stream>:<seq>:<consumer>": replaying again after a failure does
// not store it twice within the stream's duplicate window. Replay is at
// least once; every consumer of the stream gets the message again, not only
// the one that gave up on it.
//
// A replayed message keeps its AI-Deadline: DeadlinePassed in the result
// says it had passed, so a work queue expires the message again; replay
// with ReplayExtendDeadline to give it time.
func (c *Client) Replay(ctx context.Context, seq uint64, opts ...ReplayOption) (*semaq.DLQReplayed, error) {
	if seq == 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: Replay: sequences start at 1")
	}
	req := semaq.DLQReplayRequest{Seq: seq}
	if err := applyReplayOptions(&req, opts); err != nil {
		return nil, err
	}
	var resp semaq.DLQReplayResponse
	if err := c.request(ctx, semaq.APIDLQReplay, req, &resp); err != nil {
		return nil, err
	}
	if len(resp.Replayed) != 1 {
		return nil, fmt.Errorf("client: Replay: broker reported %d replayed messages, want 1", len(resp.Replayed))
	}
	return &resp.Replayed[0], nil
}

// ReplayAll replays every dead letter of stream, oldest first, as Replay
// does. Dead letters that cannot be replayed (their payload was lost, no
// stream captures their subject any more, the ingress refuses them) stay in
// the queue and are listed in Skipped. ctx bounds the whole run.
func (c *Client) ReplayAll(ctx context.Context, stream string, opts ...ReplayOption) (*semaq.DLQReplayResponse, error) {
	if err := semaq.CheckStreamName(stream); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: ReplayAll: %v", err)
	}
	req := semaq.DLQReplayRequest{Stream: stream, All: true}
	if err := applyReplayOptions(&req, opts); err != nil {
		return nil, err
	}
	out := &semaq.DLQReplayResponse{Replayed: []semaq.DLQReplayed{}}
	for {
		var resp semaq.DLQReplayResponse
		if err := c.request(ctx, semaq.APIDLQReplay, req, &resp); err != nil {
			return out, err
		}
		out.Replayed = append(out.Replayed, resp.Replayed...)
		out.Skipped = append(out.Skipped, resp.Skipped...)
		out.Last = max(out.Last, resp.Last)
		if resp.Remaining == 0 || resp.Last <= req.After {
			return out, nil
		}
		req.After = resp.Last
	}
}

// ReplayOption configures Replay and ReplayAll.
type ReplayOption func(*semaq.DLQReplayRequest) error

// ReplayExtendDeadline replays with AI-Deadline moved to the time of the
// replay plus d, and AI-Timeout dropped: a message whose deadline passed
// gets d to be served instead of expiring again. d is at most
// semaq.DLQMaxExtendDeadline.
func ReplayExtendDeadline(d time.Duration) ReplayOption {
	return func(r *semaq.DLQReplayRequest) error {
		if d <= 0 {
			return fmt.Errorf("extend deadline %s: want more than 0", d)
		}
		if err := semaq.CheckExtendDeadline(d); err != nil {
			return err
		}
		r.ExtendDeadline = d
		return nil
	}
}

func applyReplayOptions(req *semaq.DLQReplayRequest, opts []ReplayOption) error {
	for _, o := range opts {
		if err := o(req); err != nil {
			return semaq.NewAPIError(semaq.ErrBadRequest, "client: %v", err)
		}
	}
	return nil
}

// DeleteDeadLetter removes one dead letter without replaying it.
func (c *Client) DeleteDeadLetter(ctx context.Context, seq uint64) error {
	if seq == 0 {
		return semaq.NewAPIError(semaq.ErrBadRequest, "client: DeleteDeadLetter: sequences start at 1")
	}
	return c.request(ctx, semaq.APIDLQPurge, semaq.DLQPurgeRequest{Seq: seq}, nil)
}

// PurgeDeadLetters removes the dead letters of stream and consumer (empty
// matches all; both empty removes every dead letter) and returns how many.
func (c *Client) PurgeDeadLetters(ctx context.Context, stream, consumer string) (uint64, error) {
	var resp semaq.DLQPurgeResponse
	if err := c.request(ctx, semaq.APIDLQPurge, semaq.DLQPurgeRequest{Stream: stream, Consumer: consumer}, &resp); err != nil {
		return 0, err
	}
	return resp.Purged, nil
}

// TermDeadLetter dead-letters the message with its payload and then
// terminates it, so it is never redelivered. Use it instead of Term on
// workqueue and interest streams: they remove a terminated message before
// JetStream reports the termination, and the broker's dead letter would
// then hold only the reason. On any stream the broker stores one dead
// letter for the two.
func (m *Msg) TermDeadLetter(ctx context.Context, reason string) error {
	md, err := m.jm.Metadata()
	if err != nil {
		return fmt.Errorf("client: TermDeadLetter: %w", err)
	}
	req := semaq.DLQCaptureRequest{
		Stream: md.Stream, Consumer: md.Consumer, StreamSeq: md.Sequence.Stream,
		Deliveries: md.NumDelivered, Reason: reason,
	}
	if err := m.c.request(ctx, semaq.APIDLQCapture, req, nil); err != nil {
		return err
	}
	return m.Term(reason)
}
