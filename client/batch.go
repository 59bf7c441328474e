package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client/internal/denial"
	"github.com/semaq/semaq/semaq"
)

// BatchOption sets how a batch is published.
type BatchOption func(*batchOptions)

type batchOptions struct {
	atomic bool
	door   string
}

// Atomic makes a batch all or nothing: every message is checked by the
// ingress before any is stored, the first refusal refuses the batch (its
// BatchAck names the message), and the messages must all land in one
// stream (docs/batches.md).
func Atomic() BatchOption { return func(o *batchOptions) { o.atomic = true } }

// ViaHTTP counts the batch under the HTTP door in the broker's metrics:
// the HTTP front door publishes its batches with it.
func ViaHTTP() BatchOption { return func(o *batchOptions) { o.door = "http" } }

// PublishBatch sends msgs to the ingress in one NATS message and waits for
// the answer: one result per message, by index (docs/batches.md). Each
// message takes the whole pipeline on its own, as a Publish would.
//
// A fast batch (the default) stores what the ingress accepts: the error
// is nil and ack.Err() names the first message refused, if any. An atomic
// batch (Atomic) stores all or nothing: a refusal returns the BatchAck
// with an error matching semaq.ErrBatchRefused, naming the message. A
// batch refused as a whole (malformed, over a bound: semaq.ErrBatchLimit)
// returns its error. Up to semaq.MaxBatchMsgs messages, within the
// server's max payload for the whole batch.
//
// Unlike PublishMsg, PublishBatch draws no cancel tokens: set
// semaq.HdrCancelToken on a queue request that must be cancellable by its
// token.
func (c *Client) PublishBatch(ctx context.Context, msgs []*nats.Msg, opts ...BatchOption) (*semaq.BatchAck, error) {
	var o batchOptions
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case len(msgs) == 0:
		return nil, semaq.NewAPIError(semaq.ErrBadBatch, "a batch of no messages")
	case len(msgs) > semaq.MaxBatchMsgs:
		return nil, semaq.NewAPIError(semaq.ErrBatchLimit, "a batch of %d messages is over the bound of %d; split it", len(msgs), semaq.MaxBatchMsgs)
	}
	bms := make([]semaq.BatchMsg, len(msgs))
	size := len(semaq.BatchFrameMagic) + 1
	for i, m := range msgs {
		if m == nil {
			return nil, semaq.NewAPIError(semaq.ErrBadBatch, "batch message %d is nil", i)
		}
		bms[i] = semaq.BatchMsg{Subject: m.Subject, Header: m.Header, Data: m.Data}
		size += len(m.Subject) + len(m.Data) + 8
		for k, vs := range m.Header {
			for _, v := range vs {
				size += len(k) + len(v) + 4
			}
		}
	}
	req := nats.NewMsg(semaq.APIPublishBatch)
	if o.door != "" {
		req.Header.Set("Semaq-Batch-Door", o.door)
	}
	injectIfAbsent(ctx, req.Header)
	req.Data = semaq.AppendBatchFrame(make([]byte, 0, size), o.atomic, bms)
	if limit := c.nc.MaxPayload(); int64(len(req.Data)) > limit {
		return nil, semaq.NewAPIError(semaq.ErrBatchLimit, "a batch of %d messages is %d bytes, over the server's max payload of %d; send fewer messages per batch",
			len(msgs), len(req.Data), limit)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	// The server refuses a user without the grant (a reader, a worker)
	// with an asynchronous error, not an answer: the request ends with it.
	ctx, done := c.denied.Watch(ctx, semaq.APIPublishBatch)
	defer done()
	resp, err := c.nc.RequestMsgWithContext(ctx, req)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, semaq.NewAPIError(semaq.ErrUnavailable, "no broker takes batches on %s: is it a SemaQ broker of this version?", semaq.APIPublishBatch)
		}
		if d := denial.Cause(ctx); d != nil {
			err = d
		}
		if errors.Is(err, semaq.ErrForbidden) || errors.Is(err, nats.ErrPermissionViolation) {
			return nil, semaq.NewAPIError(semaq.ErrForbidden, "this user may not publish batches (%v); publishers and services may", err)
		}
		return nil, fmt.Errorf("client: publish batch of %d: %w", len(msgs), err)
	}
	ack, err := semaq.ParseBatchAck(resp.Data, len(msgs))
	if err != nil {
		return nil, fmt.Errorf("client: publish batch of %d: %w", len(msgs), err)
	}
	if ack.Error != nil {
		return ack, ack.Error
	}
	return ack, nil
}
