package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/semaq/semaq/semaq"
)

// Announcement is an agent's announcement kept alive by heartbeats: a
// goroutine renews it every third of its TTL until Stop or Leave. Its
// methods are safe for concurrent use.
type Announcement struct {
	c   *Client
	req semaq.AgentAnnounceRequest

	mu      sync.Mutex
	info    semaq.AgentInfo
	lastErr error

	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

// Announce registers agent a in the broker's table for ttl (zero means
// semaq.DefaultAgentTTL) and keeps renewing the announcement until Stop or
// Leave. The first announcement is made before Announce returns: an agent
// the broker refuses fails with semaq.ErrBadAgent. A heartbeat that fails
// is retried on the next beat; Err reports it.
func (c *Client) Announce(ctx context.Context, a semaq.Agent, ttl time.Duration) (*Announcement, error) {
	if _, err := semaq.CheckAgent(&a, ttl); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadAgent, "client: Announce: %v", err)
	}
	an := &Announcement{
		c:       c,
		req:     semaq.AgentAnnounceRequest{Agent: a, TTL: ttl},
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	if err := an.beat(ctx); err != nil {
		return nil, err
	}
	go an.heartbeat(an.Info().TTL / 3)
	return an, nil
}

func (an *Announcement) beat(ctx context.Context) error {
	var info semaq.AgentInfo
	err := an.c.request(ctx, semaq.APIAgentAnnounce, an.req, &info)
	an.mu.Lock()
	defer an.mu.Unlock()
	an.lastErr = err
	if err == nil {
		an.info = info
	}
	return err
}

func (an *Announcement) heartbeat(every time.Duration) {
	defer close(an.stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			_ = an.beat(ctx) // kept in lastErr; the next beat retries
			cancel()
		case <-an.stop:
			return
		}
	}
}

// Info is the announcement as the broker last accepted it.
func (an *Announcement) Info() semaq.AgentInfo {
	an.mu.Lock()
	defer an.mu.Unlock()
	return an.info
}

// Err is the error of the last heartbeat; nil when it succeeded.
func (an *Announcement) Err() error {
	an.mu.Lock()
	defer an.mu.Unlock()
	return an.lastErr
}

// Stop ends the heartbeats without leaving: the agent stays in the table
// until its TTL passes, as if it had died. Idempotent.
func (an *Announcement) Stop() {
	an.stopOnce.Do(func() { close(an.stop) })
	<-an.stopped
}

// Leave ends the heartbeats and removes the agent from the table at once.
// An agent already gone (its TTL passed) is not an error.
func (an *Announcement) Leave(ctx context.Context) error {
	an.Stop()
	err := an.c.request(ctx, semaq.APIAgentLeave, semaq.AgentLeaveRequest{ID: an.req.ID}, nil)
	if errors.Is(err, semaq.ErrAgentNotFound) {
		return nil
	}
	return err
}

// Agents lists the live agents, by ID.
func (c *Client) Agents(ctx context.Context) ([]semaq.AgentInfo, error) {
	var resp semaq.AgentListResponse
	if err := c.request(ctx, semaq.APIAgentList, nil, &resp); err != nil {
		return nil, err
	}
	if resp.Agents == nil {
		resp.Agents = []semaq.AgentInfo{}
	}
	return resp.Agents, nil
}

// IntentSubscription delivers the messages of one intent; see ServeIntent.
// Next and Close are those of Subscription.
type IntentSubscription struct {
	*Subscription
	intent string
}

// ServeIntent subscribes to the messages on subject whose AI-Intent is
// intent, as one of the agents serving it: every ServeIntent for the same
// intent pulls from one durable (IntentDurable), so each message goes to
// one of them, and the messages a dead agent held unacknowledged are
// redelivered to the others after the ack wait. opts may set prefetch,
// ack wait and the like; WithFilter and WithDurable are refused.
//
// The durable sees every message on subject and Next acknowledges, for
// this intent only, those of other intents. A broker-side filter would
// save that traffic, but a filtered durable has one subscriber at a time
// (docs/filtering.md), and agents must share.
func (c *Client) ServeIntent(ctx context.Context, subject, intent string, opts ...SubscribeOption) (*IntentSubscription, error) {
	if err := semaq.CheckIntent(intent); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: ServeIntent: %v", err)
	}
	var o subscribeOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	if o.filter != "" || o.durable != "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: ServeIntent: the intent chooses the durable and the filter; leave out WithFilter and WithDurable")
	}
	opts = append(opts[:len(opts):len(opts)], WithDurable(IntentDurable(intent)))
	sub, err := c.Subscribe(ctx, subject, opts...)
	if err != nil {
		return nil, err
	}
	return &IntentSubscription{Subscription: sub, intent: intent}, nil
}

// Intent is the intent the subscription serves.
func (s *IntentSubscription) Intent() string { return s.intent }

// Next returns the next message of the intent, acknowledging on the way
// the messages of other intents (or without one).
func (s *IntentSubscription) Next(ctx context.Context) (*Msg, error) {
	for {
		m, err := s.Subscription.Next(ctx)
		if err != nil {
			return nil, err
		}
		if env, err := m.Envelope(); err == nil && env.Intent == s.intent {
			return m, nil
		}
		if err := m.Ack(ctx); err != nil {
			return nil, fmt.Errorf("client: skipping seq %d of another intent: %w", m.Seq, err)
		}
	}
}

// IntentDurable is the durable name ServeIntent uses for intent:
// "agents-" and the intent, with every byte other than a letter, digit,
// '-' or '_' replaced by '_' and, when one was or the intent is longer
// than 100 bytes (then cut there), a hash of the intent appended so that
// distinct intents keep distinct durables.
func IntentDurable(intent string) string { return "agents-" + semaq.NameToken(intent, 100) }
