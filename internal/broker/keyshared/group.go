package keyshared

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/keyhash"
	"github.com/semaq/semaq/internal/broker/pump"
	"github.com/semaq/semaq/internal/expr"
)

// group is one running group and its pump.
type group struct {
	ks                    *Service
	stream, subject, name string
	keySrc, ackP          string
	prog                  *expr.Program
	ackWait               time.Duration
	cc                    jetstream.ConsumeContext
	ackSub                *nats.Subscription
	stopTick, tickDone    chan struct{}
	stopOnce              sync.Once
	remote                []*nats.Subscription // subscribeRemote

	mu      sync.Mutex
	members []*member
	keys    map[string]*keyState
	bySeq   map[uint64]*keyState // messages in flight at a member
	held    int
	stopped bool
	keyErrs uint64
	// settleSeq: when the pump started, the consumer had messages in flight
	// from an earlier run whose keys are unknown. Until they have come
	// back (the ack floor reaches settleSeq) or one ack wait has passed,
	// first deliveries after settleSeq are held.
	settling    bool
	settleSeq   uint64
	settleUntil time.Time
	// pinned: keys of messages in flight from an earlier run are known
	// (scan.go), their owner is not; the tick drops what the ack floor
	// passes.
	pinned bool
	// scanAcks are acks seen while the scan ran, of messages it may find.
	scanning bool
	scanAcks map[uint64]bool
}

// keyState is the state of one key with messages in flight or held.
type keyState struct {
	key      string
	hash     uint64
	owner    *member
	inflight map[uint64]time.Time // stream seq -> sent or last in-progress
	held     []heldMsg            // by stream seq
}

type heldMsg struct {
	seq uint64
	jm  jetstream.Msg
}

// start runs the pump: ack watcher first, so no ack of a forwarded message
// is missed, then the keys of messages in flight from an earlier run (a
// restart, a lost node), then the consumer. Other nodes reach the group
// from then on.
// A member leaving at once may stop the group while it starts: stop and
// start meet under g.mu.
func (g *group) start(cons jetstream.Consumer) error {
	ackSub, err := g.ks.deps.NC.Subscribe(g.ackP+"*.*.*.*.*", g.onAck)
	if err != nil {
		return err
	}
	_ = ackSub.SetPendingLimits(-1, -1)
	g.mu.Lock()
	if !g.stopped {
		g.ackSub = ackSub
	}
	g.scanning, g.scanAcks = true, map[uint64]bool{}
	stopped := g.stopped
	g.mu.Unlock()
	if stopped {
		_ = ackSub.Unsubscribe() // stop ran before it was there to see
		return nil
	}
	g.learnInFlight(cons)
	if err := g.subscribeRemote(); err != nil {
		return err
	}
	cc, err := pump.Consume(cons, g.handle, g.ks.deps.Log, "key-shared consume", "stream", g.stream, "group", g.name)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.cc = cc
	stopped = g.stopped
	g.mu.Unlock()
	if stopped {
		cc.Stop() // stop ran in between and did not see it
	}
	return nil
}

// stop ends the pump. Held messages go back to JetStream at once.
func (g *group) stop(ctx context.Context) {
	g.stopOnce.Do(func() {
		g.mu.Lock()
		g.stopped = true
		cc, ackSub := g.cc, g.ackSub
		g.mu.Unlock()
		close(g.stopTick)
		<-g.tickDone
		g.unsubscribeRemote()
		pump.Drain(ctx, cc)
		if ackSub != nil {
			_ = ackSub.Unsubscribe()
		}
		g.mu.Lock()
		for _, k := range g.keys {
			for _, h := range k.held {
				_ = h.jm.Nak()
			}
			k.held = nil
		}
		g.held = 0
		g.mu.Unlock()
	})
}

// handle runs on the consume goroutine for every delivery, in the order
// JetStream sends them.
func (g *group) handle(jm jetstream.Msg) {
	md, err := jm.Metadata()
	if err != nil {
		_ = jm.Term() // not a JetStream message: nothing to redeliver
		return
	}
	key, kerr := g.prog.Key(expr.Message{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data()})
	if kerr != nil {
		key = "" // documented: such messages share the empty key
	}
	seq := md.Sequence.Stream
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		_ = jm.Nak()
		return
	}
	if kerr != nil {
		g.keyErrs++
	}
	k := g.keys[key]
	if k == nil {
		k = g.newKeyLocked(key)
	}
	if _, ok := k.inflight[seq]; ok {
		// Redelivered: its member did not ack in time, or nak'd it.
		delete(k.inflight, seq)
		delete(g.bySeq, seq)
	}
	i, found := slices.BinarySearchFunc(k.held, seq, func(h heldMsg, s uint64) int { return cmpU64(h.seq, s) })
	if found {
		k.held[i].jm = jm // a newer delivery of a held message: its ack subject
	} else {
		k.held = slices.Insert(k.held, i, heldMsg{seq: seq, jm: jm})
		g.held++
	}
	g.releaseLocked(k)
}

func (g *group) newKeyLocked(key string) *keyState {
	k := &keyState{key: key, hash: keyhash.Of(key), inflight: map[uint64]time.Time{}}
	g.keys[key] = k
	return k
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ownerLocked picks a key's member by rendezvous hashing: the highest
// score wins, so a join takes keys only from the others in proportion and
// a leave moves only the leaver's keys.
func (g *group) ownerLocked(kh uint64) *member {
	var best *member
	var top uint64
	for _, m := range g.members {
		if s := keyhash.Mix(kh ^ m.hash); best == nil || s > top {
			best, top = m, s
		}
	}
	return best
}

// releaseLocked forwards a key's held messages to its owner, unless the key
// is moving and its previous owner still has messages in flight.
func (g *group) releaseLocked(k *keyState) {
	defer g.gcLocked(k)
	if len(k.held) == 0 || g.stopped {
		return
	}
	to := g.ownerLocked(k.hash)
	if to == nil || len(k.inflight) > 0 && k.owner != to {
		return
	}
	k.owner = to
	now := time.Now()
	n := 0
	for _, h := range k.held {
		if g.settling && h.seq > g.settleSeq {
			break
		}
		if _, err := pump.Forward(g.ks.deps.Egress, to.deliver, h.jm); err != nil {
			break // left held; the tick retries
		}
		k.inflight[h.seq] = now
		g.bySeq[h.seq] = k
		to.delivered.Add(1)
		n++
	}
	k.held = slices.Delete(k.held, 0, n)
	g.held -= n
}

func (g *group) gcLocked(k *keyState) {
	if len(k.inflight) == 0 && len(k.held) == 0 {
		delete(g.keys, k.key)
	}
}

// rebalanceLocked retries every key with held messages after membership
// changed.
func (g *group) rebalanceLocked() {
	for _, k := range g.keys {
		if len(k.held) > 0 {
			g.releaseLocked(k)
		}
	}
}

// onAck sees a copy of every ack sent to the group's consumer.
func (g *group) onAck(m *nats.Msg) {
	seq, ok := ackStreamSeq(m.Subject, len(g.ackP))
	if !ok {
		return
	}
	body := m.Data
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.bySeq[seq]
	if k == nil {
		if g.scanning && len(g.scanAcks) < scanMax && (len(body) == 0 || hasPrefix(body, "+ACK") || hasPrefix(body, "+TERM")) {
			g.scanAcks[seq] = true
		}
		return
	}
	switch {
	case len(body) == 0, hasPrefix(body, "+ACK"), hasPrefix(body, "+TERM"):
		delete(k.inflight, seq)
		delete(g.bySeq, seq)
		g.releaseLocked(k)
	case hasPrefix(body, "+WPI"):
		k.inflight[seq] = time.Now()
	}
	// -NAK and +NXT: JetStream redelivers it to the pump (handle).
}

func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }

// ackStreamSeq reads the stream sequence from a v1 ack subject
// ($JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>)
// whose prefix up to the consumer is pre bytes long.
func ackStreamSeq(subject string, pre int) (uint64, bool) {
	if len(subject) <= pre {
		return 0, false
	}
	rest := subject[pre:]
	_, rest, ok := strings.Cut(rest, ".") // delivered
	if !ok {
		return 0, false
	}
	s, _, _ := strings.Cut(rest, ".")
	seq, err := strconv.ParseUint(s, 10, 64)
	return seq, err == nil && seq > 0
}

// tick keeps held messages alive at JetStream, ends the settling period and
// forgets in-flight entries whose ack was never seen.
func (g *group) tick(cons jetstream.Consumer) {
	defer close(g.tickDone)
	every := max(g.ackWait/3, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-g.stopTick:
			return
		case <-t.C:
		}
		g.mu.Lock()
		settling, settleSeq, pinned := g.settling, g.settleSeq, g.pinned
		g.mu.Unlock()
		floor, floorKnown := uint64(0), false
		if settling || pinned {
			ctx, cancel := context.WithTimeout(context.Background(), every)
			if info, err := cons.Info(ctx); err == nil {
				floor, floorKnown = info.AckFloor.Stream, true
			}
			cancel()
		}
		now := time.Now()
		g.mu.Lock()
		if g.settling && (floorKnown && floor >= settleSeq || now.After(g.settleUntil)) {
			g.settling = false
			g.rebalanceLocked()
		}
		if g.pinned && floorKnown {
			g.unpinLocked(floor)
		}
		// An ack missed (it cannot be, short of a lost connection) would
		// pin its key to its owner; after two ack waits the message has
		// either been acked or come back.
		stale := now.Add(-2*g.ackWait - time.Second)
		for _, k := range g.keys {
			for seq, at := range k.inflight {
				if at.Before(stale) {
					delete(k.inflight, seq)
					delete(g.bySeq, seq)
				}
			}
			for _, h := range k.held {
				_ = h.jm.InProgress()
			}
			g.releaseLocked(k)
		}
		g.mu.Unlock()
	}
}
