package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// KeyBy sets the key of a key-shared subscription: a CEL key expression
// such as session (AI-Session), tenant (AI-Tenant) or payload.user_id.
// Messages with the same key go to one member of the group at a time, in
// stream order. See docs/key-shared.md.
func KeyBy(expr string) SubscribeOption {
	return exprOption("KeyBy", "the key expression", expr, func(o *subscribeOptions) { o.key = expr })
}

// WithMember names this member of a key-shared group. A member that
// reconnects under the same name gets the same keys back (while the group's
// membership is otherwise unchanged). Without it the broker picks a name.
func WithMember(name string) SubscribeOption {
	return func(o *subscribeOptions) error {
		if err := semaq.CheckConsumerName(name); err != nil {
			return fmt.Errorf("client: WithMember: %w", err)
		}
		o.member = name
		return nil
	}
}

// WithMaxAckPending bounds the messages a key-shared group has delivered
// and not yet acked, over all its members, or a filtered subscription's
// matches in flight (default 1000; the broker allows at most 10000). It
// applies when the group or durable is created.
func WithMaxAckPending(n int) SubscribeOption {
	return func(o *subscribeOptions) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("client: WithMaxAckPending: %d is outside 1..10000", n)
		}
		o.maxAckPending = n
		return nil
	}
}

// SubscribeKeyShared joins the key-shared group named group on subject:
// the group's members share its messages partitioned by key (KeyBy), each
// key's messages going to one member at a time in stream order. When
// members join or leave, keys move; a key moves only once its previous
// member has acked (or the ack wait has expired for) the messages it holds.
// The group is a durable consumer named group: it keeps its position and
// key expression (KeyBy may be left out to join an existing group).
// WithDeliver, WithStartSequence, WithAckWait and WithMaxAckPending apply when the group is
// created; WithDurable and WithFilter do not combine with it.
//
// The returned Subscription is used as any other: Next, Ack, Close. Close
// leaves the group; messages received but not returned by Next go back to
// the group at once.
func (c *Client) SubscribeKeyShared(ctx context.Context, subject, group string, opts ...SubscribeOption) (*Subscription, error) {
	o := subscribeOptions{prefetch: 128, ackWait: 30 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	if err := semaq.CheckConsumerName(group); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: key-shared group: %v", err)
	}
	if o.durable != "" || o.filter != "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: a key-shared group is durable and unfiltered; leave out WithDurable and WithFilter")
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	k := &keySharedSource{c: c, req: semaq.KeySharedJoinRequest{
		Subject: subject, Group: group, Key: o.key, Member: o.member,
		StartSeq: o.startSeq, Deliver: o.pumpDeliver(), AckWait: o.ackWait, MaxAckPending: o.pumpAckPending(),
	}}
	return c.subscribePump(ctx, "key-shared subscribe", subject, o, true, k, k.req.MaxAckPending)
}

// keySharedSource is the client end of a key-shared membership. When the
// broker dropped the member or restarted, the next ping joins again.
type keySharedSource struct {
	c   *Client
	req semaq.KeySharedJoinRequest
}

func (k *keySharedSource) start(ctx context.Context, inbox string) (pumpStarted, error) {
	k.req.DeliverSubject = inbox
	var resp semaq.KeySharedJoinResponse
	if err := k.c.request(ctx, semaq.APIKeySharedJoin, k.req, &resp); err != nil {
		return pumpStarted{}, err
	}
	// A rejoin after a broker restart keeps the name, and so the keys.
	k.req.Key, k.req.Member = resp.Key, resp.Member
	return pumpStarted{id: resp.ID, stream: resp.Stream, consumer: resp.Consumer, heartbeat: resp.Heartbeat}, nil
}

func (k *keySharedSource) ping(ctx context.Context, id string) error {
	return k.c.request(ctx, fmt.Sprintf(semaq.APIKeySharedPingT, id), nil, nil)
}

// lost: no responder, the broker restarted; gone, it dropped this member
// (a missed heartbeat). Either way, join again.
func (k *keySharedSource) lost(err error) bool {
	return errors.Is(err, semaq.ErrUnavailable) || errors.Is(err, semaq.ErrMemberGone)
}

func (k *keySharedSource) received(*nats.Msg) {}

func (k *keySharedSource) end(ctx context.Context, id string) error {
	err := k.c.request(ctx, fmt.Sprintf(semaq.APIKeySharedLeaveT, id), nil, nil)
	if err != nil && !errors.Is(err, semaq.ErrMemberGone) {
		return fmt.Errorf("client: leaving key-shared group %s: %w", k.req.Group, err)
	}
	return nil
}

// KeySharedInfo describes a running key-shared group: its members, keys
// in flight and messages held while keys move. It fails with
// semaq.ErrMemberGone when the group has no members.
func (c *Client) KeySharedInfo(ctx context.Context, stream, group string) (*semaq.KeySharedGroupInfo, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	var out semaq.KeySharedGroupInfo
	if err := c.request(ctx, semaq.APIKeySharedInfo, semaq.KeySharedInfoRequest{Stream: stream, Group: group}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
