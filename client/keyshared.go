package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

// KeyBy sets the key of a key-shared subscription: a CEL key expression
// such as session (AI-Session), tenant (AI-Tenant) or payload.user_id.
// Messages with the same key go to one member of the group at a time, in
// stream order. See docs/key-shared.md.
func KeyBy(expr string) SubscribeOption {
	return func(o *subscribeOptions) error {
		if strings.TrimSpace(expr) == "" {
			return errors.New("client: KeyBy: the key expression is empty")
		}
		o.key = expr
		return nil
	}
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
	inbox := c.nc.NewInbox()
	req := semaq.KeySharedJoinRequest{
		Subject: subject, Group: group, Key: o.key, Member: o.member, DeliverSubject: inbox,
		StartSeq: o.startSeq, AckWait: o.ackWait, MaxAckPending: 1000,
	}
	if o.maxAckPending > 0 {
		req.MaxAckPending = o.maxAckPending
	}
	if o.deliver == DeliverNew {
		req.Deliver = "new"
	}
	// Room for everything the group may have in flight: JetStream bounds
	// it by the group's MaxAckPending.
	ch := make(chan *nats.Msg, 2*req.MaxAckPending+64)
	sub, err := c.nc.ChanSubscribe(inbox+".>", ch)
	if err != nil {
		return nil, fmt.Errorf("client: key-shared subscribe: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := c.nc.FlushWithContext(ctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("client: key-shared subscribe: %w", err)
	}
	var resp semaq.KeySharedJoinResponse
	if err := c.request(ctx, semaq.APIKeySharedJoin, req, &resp); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	// A rejoin after a broker restart keeps the name, and so the keys.
	req.Key, req.Member = resp.Key, resp.Member
	src := &keySharedSource{c: c, req: req, inbox: inbox, sub: sub, ch: ch, id: resp.ID,
		stopHB: make(chan struct{}), hbDone: make(chan struct{})}
	hb := resp.Heartbeat
	if hb <= 0 {
		hb = 2 * time.Second
	}
	go src.heartbeat(hb)
	return &Subscription{c: c, stream: resp.Stream, subject: subject, name: resp.Consumer,
		durable: true, opts: o, done: make(chan struct{}), src: src}, nil
}

// keySharedSource receives the messages the broker forwards to this
// member, and keeps the membership alive with pings.
type keySharedSource struct {
	c      *Client
	req    semaq.KeySharedJoinRequest
	inbox  string
	sub    *nats.Subscription
	ch     chan *nats.Msg
	stopHB chan struct{}
	hbDone chan struct{}

	mu       sync.Mutex // guards id
	id       string
	received atomic.Uint64
}

func (k *keySharedSource) next(ctx context.Context, done <-chan struct{}) (jetstream.Msg, error) {
	select {
	case m := <-k.ch:
		m.Reply = m.Header.Get(semaq.HdrFilterAck)
		m.Header.Del(semaq.HdrFilterAck)
		k.received.Add(1)
		return &filteredMsg{m: m, nc: k.c.nc, subject: strings.TrimPrefix(m.Subject, k.inbox+".")}, nil
	case <-done:
		return nil, ErrSubscriptionDone
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (k *keySharedSource) heartbeat(every time.Duration) {
	defer close(k.hbDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-k.stopHB:
			return
		case <-t.C:
		}
		if k.c.nc.IsClosed() {
			return // the broker drops the member when the pings stop
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		k.mu.Lock()
		id := k.id
		k.mu.Unlock()
		err := k.c.request(ctx, fmt.Sprintf(semaq.APIKeySharedPingT, id), nil, nil)
		// No responder: the broker restarted. Gone: it dropped this member
		// (a missed heartbeat). Either way, join again.
		if errors.Is(err, semaq.ErrUnavailable) || errors.Is(err, semaq.ErrMemberGone) {
			var resp semaq.KeySharedJoinResponse
			if err := k.c.request(ctx, semaq.APIKeySharedJoin, k.req, &resp); err == nil {
				k.mu.Lock()
				k.id = resp.ID
				k.mu.Unlock()
			}
		}
		cancel()
	}
}

func (k *keySharedSource) close() error {
	close(k.stopHB)
	<-k.hbDone
	_ = k.sub.Unsubscribe()
	if k.c.nc.IsClosed() {
		return nil
	}
	k.mu.Lock()
	id := k.id
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), k.c.timeout)
	defer cancel()
	// Leave first, so what is handed back below goes to the others.
	err := k.c.request(ctx, fmt.Sprintf(semaq.APIKeySharedLeaveT, id), nil, nil)
	for {
		select {
		case m := <-k.ch:
			if ack := m.Header.Get(semaq.HdrFilterAck); ack != "" {
				_ = k.c.nc.Publish(ack, []byte("-NAK"))
			}
		default:
			_ = k.c.nc.FlushWithContext(ctx)
			if err != nil && !errors.Is(err, semaq.ErrMemberGone) {
				return fmt.Errorf("client: leaving key-shared group %s: %w", k.req.Group, err)
			}
			return nil
		}
	}
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
