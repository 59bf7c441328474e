package routes

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/routes/table"
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
// take it only to add to pending. The ingress reads the weights the rule
// watcher sets on a rule (table.Rule.SetWeights) with one atomic load.

const (
	healthInterval = time.Second
	healthAlpha    = 0.3 // EWMA weight of the newest interval
	// healthLookups bounds the messages read per interval to find which
	// target an error belongs to, when a stream stores more than one.
	healthLookups = 256
)

// adaptiveHealth describes an adaptive rule's targets for RouteInfo.
func adaptiveHealth(r *table.Rule) []semaq.RouteTargetHealth {
	if !r.Route().Adaptive {
		return nil
	}
	if w := r.Weights(); w != nil {
		return w.Health
	}
	out := make([]semaq.RouteTargetHealth, len(r.Targets()))
	for i, t := range r.Targets() {
		out[i] = semaq.RouteTargetHealth{Subject: t.Subject(), Weight: int(t.Weight()), Effective: float64(t.Weight()), Health: 1}
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
	routed  map[string]*routedCounts // by rule, this interval: the nodes' reports
	state   map[*table.Target]*targetHealth
	lookups int

	// writer: this node computes the weights (shared.go); set by the
	// interval, read by the handlers.
	writer atomic.Bool
	// The interval's own: last, each target's routed count at the last
	// report; written, the records last stored, by rule (nil until this
	// node first writes); bucket, the rule bucket's stream.
	last    map[*table.Target]uint64
	written map[string]string
	bucket  jetstream.Stream

	streamsMu sync.Mutex // guards streams
	streams   map[string]jetstream.Stream

	subs      []*nats.Subscription
	closeOnce sync.Once
	stop      context.CancelFunc // ends the interval
	done      chan struct{}      // closed when the interval has ended
}

type healthSample struct {
	errs   uint64
	latSum time.Duration
	latN   uint64
}

type targetHealth struct {
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
		pending: map[string]*healthSample{}, state: map[*table.Target]*targetHealth{},
		routed: map[string]*routedCounts{}, last: map[*table.Target]uint64{},
		streams: map[string]jetstream.Stream{},
		done:    make(chan struct{}),
	}
	empty := map[string][]string{}
	h.index.Store(&empty)
	sub, err := rt.deps.Conn.Subscribe(routedSubject, h.onRouted)
	if err != nil {
		return nil, err
	}
	h.subs = append(h.subs, sub)
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
	ctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	if !rt.deps.Gate.Go("health", func(gctx context.Context) {
		defer close(h.done)
		context.AfterFunc(gctx, stop)
		h.run(ctx)
	}) {
		h.unsubscribe()
		stop()
		return nil, errors.New("the node is shutting down")
	}
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
		h.stop()
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
	if !h.writer.Load() {
		return // every node sees the advisories; the writer counts them
	}
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

func (h *health) run(ctx context.Context) {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.tick()
	}
}

// tick reports what this node routed and, on the node that computes the
// weights, folds the interval's events and the nodes' reports into every
// adaptive rule's weights and stores them (shared.go).
func (h *health) tick() {
	tab := h.rt.Table()
	writer := h.leads()
	if writer != h.writer.Load() {
		h.rt.log.Info("adaptive route weights", "computed_here", writer)
		h.written = nil
	}
	h.writer.Store(writer)
	h.report(tab, writer)
	h.mu.Lock()
	pending, routed := h.pending, h.routed
	h.pending, h.routed = map[string]*healthSample{}, map[string]*routedCounts{}
	h.lookups = 0
	if !writer {
		clear(h.state) // a node that writes again starts from the stored weights
	}
	live := make(map[*table.Target]bool)
	index := map[string][]string{}
	recs := map[string]*weightsRecord{}
	for _, r := range tab.Rules() {
		if !r.Route().Adaptive {
			continue
		}
		if writer {
			recs[r.Name()] = h.updateRule(r, pending, routed[r.Name()], live)
		}
		for _, t := range r.Targets() {
			if name := h.rt.deps.StreamFor(t.Subject()); name != "" {
				index[name] = appendUnique(index[name], t.Subject())
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
	if writer {
		h.write(recs)
	}
}

func appendUnique(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// updateRule computes one rule's weights from the errors and latencies
// seen and rc, what the nodes routed. A target new to this node starts
// from the stored weights. h.mu is held.
func (h *health) updateRule(r *table.Rule, pending map[string]*healthSample, rc *routedCounts, live map[*table.Target]bool) *weightsRecord {
	stored := storedWeights(r)
	targets := r.Targets()
	if rc != nil && (rc.Rev != r.Rev() || len(rc.N) != len(targets)) {
		rc = nil
	}
	ths := make([]*targetHealth, len(targets))
	best := math.Inf(1)
	for i, t := range targets {
		live[t] = true
		th := h.state[t]
		if th == nil {
			th = &targetHealth{eff: 1}
			if stored != nil && i < len(stored.Targets) && stored.Targets[i].Subject == t.Subject() {
				st := stored.Targets[i]
				th.eff, th.errRate, th.errors = st.Share, st.ErrRate, st.Errors
				th.lat, th.latKnown = float64(st.Lat), st.LatKnown
			}
			h.state[t] = th
		}
		ths[i] = th
		var routed uint64
		if rc != nil {
			routed = rc.N[i]
		}
		p := pending[t.Subject()]
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
	rec := &weightsRecord{Rev: r.Rev(), Node: h.rt.deps.Node, Targets: make([]targetRecord, len(targets))}
	for i, t := range targets {
		th := ths[i]
		health := 1 - th.errRate
		if th.latKnown && th.lat > 0 && !math.IsInf(best, 1) {
			health *= min(1, best/th.lat)
		}
		health = max(0, min(1, health))
		goal := max(semaq.MinAdaptiveShare, health)
		th.eff += max(-semaq.MaxAdaptiveStep, min(semaq.MaxAdaptiveStep, goal-th.eff))
		rec.Targets[i] = targetRecord{
			Subject: t.Subject(), Share: round(th.eff, 1e-4), Health: round(health, 1e-3), ErrRate: round(th.errRate, 1e-3),
			Lat: int64(round(th.lat, float64(time.Microsecond))), LatKnown: th.latKnown, Errors: th.errors,
		}
	}
	return rec
}
