package keyshared

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/expr"
)

// A pump that starts on a consumer with messages in flight (the broker
// restarted, or the node that ran the group was lost) does not know which
// member holds them. It reads them from the stream, from the ack floor to
// the last delivered message, and pins their keys: a pinned key's messages
// are held until what was in flight of it is acked, comes back to the pump,
// or falls under the ack floor. Keys with nothing in flight flow at once.
// A message acked above the ack floor before the pump started cannot be
// told from one still in flight: it pins its key until the floor passes it
// or, at most, for two ack waits (the tick forgets it then).

const (
	// scanMax bounds the stream sequences the scan covers (and the pinned
	// messages held in memory); a consumer further behind holds every
	// newer message for one ack wait instead (settling).
	scanMax = 100_000
	// scanTime bounds the scan.
	scanTime = 10 * time.Second
)

// learnInFlight pins the keys of the messages in flight before the pump
// started, or, when it cannot read them, settles.
func (g *group) learnInFlight(cons jetstream.Consumer) {
	ctx, cancel := context.WithTimeout(context.Background(), scanTime)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		info = cons.CachedInfo()
	}
	var keys map[uint64]string
	if info.NumAckPending > 0 {
		keys, err = g.scan(ctx, info.AckFloor.Stream, info.Delivered.Stream)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	acked := g.scanAcks
	g.scanning, g.scanAcks = false, nil
	if info.NumAckPending == 0 {
		return
	}
	if err != nil {
		g.ks.deps.Log.Warn("key-shared: holding new messages for one ack wait", "stream", g.stream, "group", g.name, "err", err)
		g.settling, g.settleSeq = true, info.Delivered.Stream
		g.settleUntil = time.Now().Add(g.ackWait + time.Second)
		return
	}
	now := time.Now()
	for seq, key := range keys {
		if acked[seq] {
			continue
		}
		k := g.keys[key]
		if k == nil {
			k = g.newKeyLocked(key)
		}
		k.inflight[seq] = now // owner nil: at a member unknown
		g.bySeq[seq] = k
		g.pinned = true
	}
}

// scan reads the keys of the group's messages in (floor, last].
func (g *group) scan(ctx context.Context, floor, last uint64) (map[uint64]string, error) {
	if last <= floor {
		return nil, nil
	}
	if last-floor > scanMax {
		return nil, fmt.Errorf("%d messages between the ack floor and the last delivered one, over %d", last-floor, scanMax)
	}
	oc, err := g.ks.deps.JS.OrderedConsumer(ctx, g.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{g.subject}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: floor + 1,
	})
	if err != nil {
		return nil, err
	}
	keys := map[uint64]string{}
	for {
		batch, err := oc.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for jm := range batch.Messages() {
			n++
			md, err := jm.Metadata()
			if err != nil {
				continue
			}
			seq := md.Sequence.Stream
			if seq > last {
				return keys, nil
			}
			key, kerr := g.prog.Key(expr.Message{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data()})
			if kerr != nil {
				key = ""
			}
			keys[seq] = key
			if seq == last {
				return keys, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			return keys, nil // the rest was deleted
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// unpinLocked forgets the pinned messages the ack floor has passed: they
// were acked.
func (g *group) unpinLocked(floor uint64) {
	pinned := false
	for seq, k := range g.bySeq {
		if k.owner != nil {
			continue
		}
		if seq <= floor {
			delete(k.inflight, seq)
			delete(g.bySeq, seq)
			continue
		}
		pinned = true
	}
	g.pinned = pinned
}
