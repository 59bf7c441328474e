package routes

import (
	"context"
	"encoding/json"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/keyhash"
	"github.com/semaq/semaq/semaq"
)

// Adaptive splits (docs/routing.md): the weights of a split marked adaptive
// follow the health of its targets' consumers, as the broker observes it
// from JetStream without trusting clients:
//
//   - errors: MSG_NAKED, MSG_TERMINATED and MAX_DELIVERIES advisories of
//     the consumers on a target's stream, attributed to the target whose
//     subject the message was stored under;
//   - latency: ack samples ($JS.EVENT.METRIC.CONSUMER.ACK) of consumers that
//     sample acks (their SampleFrequency is set).
//
// Once per interval, per target: the share of routed messages that
// errored and the mean ack latency go into EWMAs; health = (1 - error
// rate) x min(1, best latency / own latency); the effective weight moves
// toward weight x max(MinAdaptiveShare, health) by at most MaxAdaptiveStep
// x weight. The ingress picks by weighted rendezvous hashing over the
// effective weights, so a sticky key keeps its target unless that target's
// weight fell or another's rose past it.
//
// Locks: health.mu guards pending and state; the advisory handlers
// take it only to add to pending. The ingress reads the weights through
// rule.eff, an atomic pointer.

const (
	healthInterval = time.Second
	healthAlpha    = 0.3 // EWMA weight of the newest interval
	// healthLookups bounds the messages read per interval to find which
	// target an error belongs to, when a stream stores more than one.
	healthLookups = 256
)

// adaptiveWeights is what an adaptive rule routes with. Immutable.
type adaptiveWeights struct {
	weights []float64 // by target, as rule.to
	health  []semaq.RouteTargetHealth
}

// pickAdaptive chooses a target by weighted rendezvous hashing: each target
// scores -w / ln(u) for u uniform in (0, 1) drawn from h and the target, the
// highest wins. A random h picks in proportion to the weights; a key's h
// keeps its target while the weights allow.
func (r *Rule) pickAdaptive(h uint64) *Target {
	var ws []float64
	if a := r.eff.Load(); a != nil {
		ws = a.weights
	}
	best, top := r.to[0], math.Inf(-1)
	for i, t := range r.to {
		w := float64(t.weight)
		if ws != nil {
			w = ws[i]
		}
		u := (float64(keyhash.Mix(h^keyhash.Of(t.subject))>>11) + 0.5) / (1 << 53)
		if s := -w / math.Log(u); s > top {
			best, top = t, s
		}
	}
	return best
}

// adaptiveHealth describes an adaptive rule's targets for RouteInfo.
func adaptiveHealth(r *Rule) []semaq.RouteTargetHealth {
	if !r.def.Adaptive {
		return nil
	}
	if a := r.eff.Load(); a != nil {
		return a.health
	}
	out := make([]semaq.RouteTargetHealth, len(r.to))
	for i, t := range r.to {
		out[i] = semaq.RouteTargetHealth{Subject: t.subject, Weight: int(t.weight), Effective: float64(t.weight), Health: 1}
	}
	return out
}

// health watches the consumers of adaptive targets: the advisory
// handlers run on their subscriptions' goroutines, the interval on its
// own (run), which close stops.
type health struct {
	rt *Router

	// index maps a stream to the adaptive targets it stores, rebuilt each
	// interval.
	index atomic.Pointer[map[string][]string]

	mu      sync.Mutex
	pending map[string]*healthSample // by target subject, this interval
	state   map[*Target]*targetHealth
	lookups int

	streamsMu sync.Mutex // guards streams
	streams   map[string]jetstream.Stream

	subs      []*nats.Subscription
	stop      chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

type healthSample struct {
	errs   uint64
	latSum time.Duration
	latN   uint64
}

type targetHealth struct {
	routed   uint64 // the target's routed count at the last interval
	errRate  float64
	lat      float64 // ns
	latKnown bool
	eff      float64 // effective share of the configured weight
	errors   uint64
}

// startHealth subscribes to the advisories and starts the interval.
func startHealth(rt *Router) (*health, error) {
	h := &health{
		rt:      rt,
		pending: map[string]*healthSample{}, state: map[*Target]*targetHealth{},
		streams: map[string]jetstream.Stream{},
		stop:    make(chan struct{}), done: make(chan struct{}),
	}
	empty := map[string][]string{}
	h.index.Store(&empty)
	for _, subj := range []string{
		"$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>",
		"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>",
		"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>",
		"$JS.EVENT.METRIC.CONSUMER.ACK.>",
	} {
		sub, err := rt.deps.Conn.Subscribe(subj, h.onEvent)
		if err != nil {
			h.unsubscribe()
			return nil, err
		}
		h.subs = append(h.subs, sub)
	}
	go h.run()
	return h, nil
}

func (h *health) unsubscribe() {
	for _, sub := range h.subs {
		_ = sub.Unsubscribe()
	}
}

// close stops the subscriptions and the interval, and waits for the
// interval's goroutine or until ctx is done. Idempotent.
func (h *health) close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.unsubscribe()
		close(h.stop)
	})
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// healthEvent holds the fields the advisories and the ack metric share.
type healthEvent struct {
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
	AckTime   int64  `json:"ack_time"` // ns; ack metric only
}

func (h *health) onEvent(m *nats.Msg) {
	targets := (*h.index.Load())
	var ev healthEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		return
	}
	ts := targets[ev.Stream]
	if len(ts) == 0 {
		return
	}
	target := ts[0]
	if len(ts) > 1 || !h.streamIsTarget(ev.Stream, target) {
		subj, ok := h.lookup(ev.Stream, ev.StreamSeq)
		if !ok {
			return
		}
		target = ""
		for _, t := range ts {
			if t == subj {
				target = t
				break
			}
		}
		if target == "" {
			return // not a routed target's message
		}
	}
	isAck := len(m.Subject) > len("$JS.EVENT.METRIC.") && m.Subject[:len("$JS.EVENT.METRIC.")] == "$JS.EVENT.METRIC."
	h.mu.Lock()
	p := h.pending[target]
	if p == nil {
		p = &healthSample{}
		h.pending[target] = p
	}
	if isAck {
		if ev.AckTime > 0 {
			p.latSum += time.Duration(ev.AckTime)
			p.latN++
		}
	} else {
		p.errs++
	}
	h.mu.Unlock()
}

// streamIsTarget reports whether stream stores only target, so an event
// on it needs no lookup.
func (h *health) streamIsTarget(stream, target string) bool {
	subjs := h.rt.deps.StreamSubjects(stream)
	return len(subjs) == 1 && subjs[0] == target
}

// lookup reads the subject a message was stored under, within the budget
// of the interval.
func (h *health) lookup(stream string, seq uint64) (string, bool) {
	h.mu.Lock()
	if h.lookups >= healthLookups {
		h.mu.Unlock()
		return "", false
	}
	h.lookups++
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	h.streamsMu.Lock()
	st := h.streams[stream]
	h.streamsMu.Unlock()
	if st == nil {
		var err error
		if st, err = h.rt.deps.JS.Stream(ctx, stream); err != nil {
			return "", false
		}
		h.streamsMu.Lock()
		h.streams[stream] = st
		h.streamsMu.Unlock()
	}
	msg, err := st.GetMsg(ctx, seq)
	if err != nil {
		return "", false // deleted since (a work queue, limits): not counted
	}
	return msg.Subject, true
}

func (h *health) run() {
	defer close(h.done)
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		h.tick()
	}
}

// tick folds the interval's events into every adaptive rule's weights.
func (h *health) tick() {
	table := h.rt.Table()
	h.mu.Lock()
	pending := h.pending
	h.pending = map[string]*healthSample{}
	h.lookups = 0
	live := make(map[*Target]bool)
	index := map[string][]string{}
	for _, r := range table.rules {
		if !r.def.Adaptive {
			continue
		}
		h.updateRule(r, pending, live)
		for _, t := range r.to {
			if name := h.rt.deps.StreamFor(t.subject); name != "" {
				index[name] = appendUnique(index[name], t.subject)
			}
		}
	}
	for t := range h.state {
		if !live[t] {
			delete(h.state, t)
		}
	}
	h.mu.Unlock()
	h.index.Store(&index)
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// updateRule computes one rule's weights. h.mu is held.
func (h *health) updateRule(r *Rule, pending map[string]*healthSample, live map[*Target]bool) {
	ths := make([]*targetHealth, len(r.to))
	best := math.Inf(1)
	for i, t := range r.to {
		live[t] = true
		th := h.state[t]
		if th == nil {
			th = &targetHealth{routed: t.matched.Load(), eff: 1}
			h.state[t] = th
		}
		ths[i] = th
		cur := t.matched.Load()
		routed := cur - th.routed
		th.routed = cur
		p := pending[t.subject]
		if p == nil {
			p = &healthSample{}
		}
		th.errors += p.errs
		if routed > 0 || p.errs > 0 {
			ratio := min(1, float64(p.errs)/float64(max(routed, 1)))
			th.errRate = healthAlpha*ratio + (1-healthAlpha)*th.errRate
		} else {
			// Quiet: no evidence either way; trust returns gradually.
			th.errRate *= 1 - healthAlpha
		}
		if p.latN > 0 {
			mean := float64(p.latSum) / float64(p.latN)
			if th.latKnown {
				th.lat = healthAlpha*mean + (1-healthAlpha)*th.lat
			} else {
				th.lat, th.latKnown = mean, true
			}
		}
		if th.latKnown && th.lat > 0 {
			best = min(best, th.lat)
		}
	}
	a := &adaptiveWeights{weights: make([]float64, len(r.to)), health: make([]semaq.RouteTargetHealth, len(r.to))}
	for i, t := range r.to {
		th := ths[i]
		health := 1 - th.errRate
		if th.latKnown && th.lat > 0 && !math.IsInf(best, 1) {
			health *= min(1, best/th.lat)
		}
		health = max(0, min(1, health))
		goal := max(semaq.MinAdaptiveShare, health)
		th.eff += max(-semaq.MaxAdaptiveStep, min(semaq.MaxAdaptiveStep, goal-th.eff))
		a.weights[i] = float64(t.weight) * th.eff
		a.health[i] = semaq.RouteTargetHealth{
			Subject: t.subject, Weight: int(t.weight), Effective: math.Round(a.weights[i]*100) / 100,
			Health: math.Round(health*1000) / 1000, ErrorRate: math.Round(th.errRate*1000) / 1000,
			AckLatency: time.Duration(th.lat), Errors: th.errors,
		}
	}
	r.eff.Store(a)
}
