package dispatch

import (
	"fmt"
	"sync"
	"time"

	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/semaq"
)

// Admission control of a work queue (docs/queues.md). The ingress asks
// Admit before it stores a request, and Admit reserves the request's share
// of the limits at once, under one lock: publishers racing each other
// cannot all pass a check only one of them fits, as they could when the
// check read counters the dispatcher updates only once it has read the
// request back from the stream. When the request reaches the dispatcher,
// its reservation becomes indexed state in one critical section, so at no
// instant is it counted twice or not at all.
//
// A reservation the dispatcher never sees (JetStream refused the store, a
// duplicate Nats-Msg-Id, the ingress failed to send) must not hold
// capacity for ever: reservations live in two generations that turn over
// every reserveEpoch, so one is dropped between reserveEpoch and twice that
// after it was made. That is the only way the limits can be overshot (a
// dispatcher that falls that far behind its stream), and JetStream's own
// limits (MaxMsgs, MaxBytes, DiscardNew) hold whatever happens.

// reserveEpoch is how long a reservation lives at least (twice that at
// most) before the dispatcher indexes its request.
const reserveEpoch = 2 * time.Second

// usage is what requests take of a queue's limits.
type usage struct{ msgs, tokens, bytes int64 }

func (u *usage) add(v usage) {
	u.msgs += v.msgs
	u.tokens += v.tokens
	u.bytes += v.bytes
}

// take subtracts v from u, no field going below zero, and returns what
// was left over.
func (u *usage) take(v usage) usage {
	f := func(have *int64, want int64) int64 {
		n := min(*have, want)
		*have -= n
		return want - n
	}
	return usage{f(&u.msgs, v.msgs), f(&u.tokens, v.tokens), f(&u.bytes, v.bytes)}
}

// requestUsage is what one request counts: tokens as the sender declared
// them (-1: estimated from the payload), bytes its payload plus
// QueueRequestOverhead. The ingress and the dispatcher compute it alike.
func requestUsage(tokens int64, dataLen int) usage {
	return usage{1, quota.RequestTokens(tokens, dataLen), int64(dataLen) + semaq.QueueRequestOverhead}
}

// admission is a queue's admission state, shared by the ingress and the
// dispatcher. Lock order: Dispatcher.mu, then admission.mu.
type admission struct {
	mu       sync.Mutex
	indexed  usage    // what the dispatcher indexes (queued, delayed, held)
	floor    usage    // what the stream held at start, until the dispatcher has read it all
	reserved [2]usage // admitted, not yet indexed: the current and the previous generation
	cur      int
}

// held is what the queue holds and has promised. mu is held.
func (a *admission) held() usage {
	h := usage{max(a.indexed.msgs, a.floor.msgs), max(a.indexed.tokens, a.floor.tokens), max(a.indexed.bytes, a.floor.bytes)}
	h.add(a.reserved[0])
	h.add(a.reserved[1])
	return h
}

// indexed records the dispatcher's totals after it indexed arrivals (their
// reservations, oldest first, become indexed) or removed requests.
func (a *admission) setIndexed(total, arrived usage, caughtUp bool) {
	a.mu.Lock()
	if arrived != (usage{}) {
		left := a.reserved[a.cur^1].take(arrived)
		a.reserved[a.cur].take(left)
	}
	a.indexed = total
	if caughtUp {
		a.floor = usage{}
	}
	a.mu.Unlock()
}

// rotate drops the older generation of reservations.
func (a *admission) rotate() {
	a.mu.Lock()
	a.cur ^= 1
	a.reserved[a.cur] = usage{}
	a.mu.Unlock()
}

// pending is how many admitted requests the dispatcher has not indexed.
func (a *admission) pending() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reserved[0].msgs + a.reserved[1].msgs
}

// Admit is the ingress's admission check for a request to this queue, of
// dataLen bytes of payload: nil admits it, and reserves its share of the
// limits at once; an ErrOverloaded error refuses it, with a retry-after.
// It takes one short lock: it runs on the ingress's hot path.
func (d *Dispatcher) Admit(env *semaq.Envelope, dataLen int) *semaq.APIError {
	return d.admit(int64(env.PromptTokens), dataLen)
}

// admit is Admit of a request of tokens prompt tokens (-1: estimated from
// the payload) and dataLen bytes of payload.
func (d *Dispatcher) admit(tokens int64, dataLen int) *semaq.APIError {
	u := requestUsage(tokens, dataLen)
	d.adm.mu.Lock()
	why := d.overLimit(d.adm.held(), u)
	if why == "" {
		d.adm.reserved[d.adm.cur].add(u)
	}
	d.adm.mu.Unlock()
	if why == "" {
		d.admitted.Add(1)
		return nil
	}
	d.refused.Add(1)
	retry := d.retryAfterMs.Load()
	if retry <= 0 {
		retry = 1000
	}
	e := semaq.NewAPIError(semaq.ErrOverloaded, "queue %s is overloaded: %s; retry after %s", d.name, why,
		(time.Duration(retry) * time.Millisecond).String())
	e.RetryAfterMs = retry
	return e
}

// saturation says why a request of tokens prompt tokens and no payload
// would be refused now, or "" when it would be admitted.
func (d *Dispatcher) saturation(tokens int64) string {
	d.adm.mu.Lock()
	defer d.adm.mu.Unlock()
	return d.overLimit(d.adm.held(), usage{1, tokens, semaq.QueueRequestOverhead})
}

// overLimit says why a request u would be refused when the queue holds h.
// An empty queue admits anything (up to MaxMessages), so one oversize
// request is never refused forever.
func (d *Dispatcher) overLimit(h, u usage) string {
	c := &d.cfg
	switch {
	case h.msgs >= c.MaxMessages:
		return fmt.Sprintf("%d requests held, limit %d", h.msgs, c.MaxMessages)
	case h.msgs == 0:
		return ""
	case c.MaxBytes > 0 && h.bytes+u.bytes > c.MaxBytes:
		return fmt.Sprintf("%d bytes held and %d more asked, limit %d", h.bytes, u.bytes, c.MaxBytes)
	case c.MaxTokens > 0 && h.tokens+u.tokens > c.MaxTokens:
		return fmt.Sprintf("%d prompt tokens held and %d more asked, limit %d", h.tokens, u.tokens, c.MaxTokens)
	}
	if thr := d.adaptiveTokens.Load(); thr > 0 && h.tokens+u.tokens > thr {
		return fmt.Sprintf("%d prompt tokens held and %d more asked, adaptive limit %d for a wait of %s", h.tokens, u.tokens, thr, c.MaxWait)
	}
	return ""
}

// StreamMaxBytes is the queue stream's own byte limit, JetStream's
// backstop behind admission: MaxBytes plus an eighth for headers larger
// than QueueRequestOverhead, plus room for one request at the server's
// largest payload (an empty queue admits one request of any size).
func StreamMaxBytes(c semaq.QueueConfig, maxPayload int64) int64 {
	if c.MaxBytes <= 0 {
		return -1
	}
	return c.MaxBytes + c.MaxBytes/8 + maxPayload
}
