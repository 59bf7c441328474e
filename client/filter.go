package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// filterSource is the client end of a broker-side filter. When the
// broker no longer runs the filter (it restarted), the next ping starts it
// again: a durable resumes where it was, an ephemeral after the last
// message returned.
type filterSource struct {
	c       *Client
	req     semaq.FilterStartRequest
	started bool

	warnings []string // from the first START

	mu       sync.Mutex // guards stats and hasStats
	stats    semaq.FilterStats
	hasStats bool
	lastSeq  atomic.Uint64
}

// WithFilter makes the subscription server-side filtered: the broker
// evaluates the CEL expression (docs/expressions.md) on every message and
// sends only the matches; the rest are acknowledged by the broker. Acks,
// naks and redelivery work as without a filter. With WithDurable the filter
// is stored with the durable: a later Subscribe with the same name resumes
// with it (WithFilter may then be left out, and a different expression is
// refused). A message the expression fails on (a missing field, a type
// mismatch) does not match. See docs/filtering.md.
func WithFilter(expr string) SubscribeOption {
	return exprOption("WithFilter", "the expression", expr, func(o *subscribeOptions) { o.filter = expr })
}

// WithFilterPlugin makes the subscription server-side filtered by the
// filter-stage plugin of that name (docs/plugins.md) too: the broker calls
// it on every message WithFilter's expression matched (every message
// without one) and sends only what it keeps. A durable resumed with a
// plugin names it again.
func WithFilterPlugin(name string) SubscribeOption {
	return exprOption("WithFilterPlugin", "the plugin name", name, func(o *subscribeOptions) { o.plugin = name })
}

// filter is s's filter, or nil for a subscription without one.
func (s *Subscription) filter() *filterSource {
	if p, ok := s.src.(*pumpSource); ok {
		f, _ := p.l.(*filterSource)
		return f
	}
	return nil
}

// FilterWarnings returns what the broker warned about when the filter
// started, such as a payload field the JSON schema bound to the subject
// does not declare (a misspelled field matches nothing). Nil for a
// subscription without a filter.
func (s *Subscription) FilterWarnings() []string {
	if f := s.filter(); f != nil {
		return append([]string(nil), f.warnings...)
	}
	return nil
}

// FilterStats returns the filter's counters as the broker last reported
// them: on each heartbeat ping and, final, when Close stops the filter.
// MissingField counts messages that lacked a field the filter reads. ok is
// false for a subscription without a filter and before the first report.
// Safe for concurrent use.
func (s *Subscription) FilterStats() (st semaq.FilterStats, ok bool) {
	f := s.filter()
	if f == nil {
		return st, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, f.hasStats
}

func (f *filterSource) setStats(st semaq.FilterStats) {
	f.mu.Lock()
	f.stats, f.hasStats = st, true
	f.mu.Unlock()
}

func (c *Client) subscribeFiltered(ctx context.Context, subject string, o subscribeOptions) (*Subscription, error) {
	f := &filterSource{c: c, req: semaq.FilterStartRequest{
		Subject: subject, Filter: o.filter, Plugin: o.plugin, Durable: o.durable, StartSeq: o.startSeq,
		Deliver: o.pumpDeliver(), MaxAckPending: o.pumpAckPending(), AckWait: o.ackWait,
	}}
	if o.max > 0 {
		f.req.MaxAckPending = min(o.max, f.req.MaxAckPending)
	}
	return c.subscribePump(ctx, "filtered subscribe", subject, o, o.durable != "", f, f.req.MaxAckPending)
}

func (f *filterSource) start(ctx context.Context, inbox string) (pumpStarted, error) {
	req := f.req
	req.DeliverSubject = inbox
	if f.started && req.Durable == "" {
		// A restart: after the last message returned.
		if seq := f.lastSeq.Load(); seq > 0 {
			req.StartSeq, req.Deliver = seq+1, ""
		}
	}
	var resp semaq.FilterStartResponse
	if err := f.c.request(ctx, semaq.APIFilterStart, req, &resp); err != nil {
		return pumpStarted{}, err
	}
	if !f.started {
		// Restarts resume this consumer with this filter.
		f.req.Filter, f.warnings, f.started = resp.Filter, resp.Warnings, true
	}
	return pumpStarted{id: resp.ID, stream: resp.Stream, consumer: resp.Consumer, heartbeat: resp.Heartbeat}, nil
}

func (f *filterSource) ping(ctx context.Context, id string) error {
	var st semaq.FilterStats
	err := f.c.request(ctx, fmt.Sprintf(semaq.APIFilterPingT, id), nil, &st)
	if err == nil {
		f.setStats(st)
	}
	return err
}

// lost: no responder, the broker restarted and lost the filter; gone, the
// broker ended it, but a durable's was taken over by a newer subscriber
// and stays with it.
func (f *filterSource) lost(err error) bool {
	return errors.Is(err, semaq.ErrUnavailable) || errors.Is(err, semaq.ErrFilterGone) && f.req.Durable == ""
}

func (f *filterSource) received(m *nats.Msg) {
	if md, err := m.Metadata(); err == nil {
		f.lastSeq.Store(md.Sequence.Stream)
	}
}

func (f *filterSource) end(ctx context.Context, id string) error {
	var st semaq.FilterStats
	err := f.c.request(ctx, fmt.Sprintf(semaq.APIFilterStopT, id), nil, &st)
	if err == nil {
		f.setStats(st)
	}
	if err != nil && !errors.Is(err, semaq.ErrFilterGone) {
		return fmt.Errorf("client: stopping filter: %w", err)
	}
	return nil
}
