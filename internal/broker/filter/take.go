package filter

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/pump"
	"github.com/semaq/semaq/internal/wallclock"
)

// A START for a durable takes it over (docs/filtering.md), on whatever node
// of a cluster its pump ran: the node running it listens on takeSubject
// while it does and stops its pump when asked, so two nodes never pump one
// durable. The subjects are the broker's own (pump.RemotePrefix).
//
// A pump stops when a later START asks it to. Two STARTs racing through
// two nodes may both find nobody to ask: each makes a claim (when, and a
// random tie-break) and says it once it listens, and the pump with the
// older claim stops.

// takeWait bounds the wait for the node pumping a durable to stop it.
const takeWait = 5 * time.Second

func takeSubject(stream, durable string) string {
	return pump.RemotePrefix + "f.take." + stream + "." + durable
}

// claim is a START's claim on a durable.
type claim struct {
	At int64  `json:"at"` // unix nanos
	ID string `json:"id"`
}

func newClaim() claim { return claim{At: wallclock.Now().UnixNano(), ID: nuid.Next()} }

func (c claim) olderThan(o claim) bool {
	return c.At < o.At || c.At == o.At && c.ID < o.ID
}

// takeOver asks the node pumping stream's durable, if any, to stop; it
// returns once that node has stopped it, nobody runs it, or takeWait has
// passed (then it is logged).
func (f *Service) takeOver(ctx context.Context, stream, durable string, c claim) {
	if f.deps.NC == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, takeWait)
	defer cancel()
	body, _ := json.Marshal(c)
	_, err := f.deps.NC.RequestWithContext(ctx, takeSubject(stream, durable), body)
	if err != nil && !errors.Is(err, nats.ErrNoResponders) {
		f.deps.Log.Warn("filter: the node pumping a durable did not stop it", "stream", stream, "durable", durable, "err", err)
	}
}

// listenTakeover makes p's durable one the other nodes can take over.
func (f *Service) listenTakeover(p *sub) {
	if f.deps.NC == nil {
		return
	}
	subject := takeSubject(p.stream, p.consumer)
	take, err := f.deps.NC.Subscribe(subject, func(m *nats.Msg) {
		// A request comes from a START after this one: it wins. A plain
		// publish is a START's word after it started, for one that raced
		// it: the older claim stops (node clocks decide only then).
		var c claim
		if m.Reply == "" && (json.Unmarshal(m.Data, &c) != nil || !p.claim.olderThan(c)) {
			return
		}
		f.deps.Log.Info("filter taken over", "stream", p.stream, "consumer", p.consumer)
		f.stop(p)
		if m.Reply != "" {
			_ = m.Respond(nil)
		}
	})
	if err != nil {
		f.deps.Log.Warn("filter: cannot listen for takeovers", "stream", p.stream, "consumer", p.consumer, "err", err)
		return
	}
	f.mu.Lock()
	ended := p.ended
	if !ended {
		p.take = take
	}
	f.mu.Unlock()
	if ended {
		_ = take.Unsubscribe()
		return
	}
	// For a START that raced this one and found nobody to ask either.
	body, _ := json.Marshal(p.claim)
	_ = f.deps.NC.Publish(subject, body)
}
