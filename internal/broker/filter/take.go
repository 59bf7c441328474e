package filter

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/pump"
)

// A START for a durable takes it over (docs/filtering.md), on whatever node
// of a cluster its pump ran: the node running it listens on takeSubject
// while it does and stops its pump when asked, so two nodes never pump one
// durable. The subjects are the broker's own (pump.RemotePrefix).

// takeWait bounds the wait for the node pumping a durable to stop it.
const takeWait = 5 * time.Second

func takeSubject(stream, durable string) string {
	return pump.RemotePrefix + "f.take." + stream + "." + durable
}

// takeOver asks the node pumping stream's durable, if any, to stop; it
// returns once that node has stopped it, nobody runs it, or takeWait has
// passed (then it is logged: both pumps run until the other's client
// stops pinging).
func (f *Service) takeOver(ctx context.Context, stream, durable string) {
	if f.deps.NC == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, takeWait)
	defer cancel()
	_, err := f.deps.NC.RequestWithContext(ctx, takeSubject(stream, durable), nil)
	if err != nil && !errors.Is(err, nats.ErrNoResponders) {
		f.deps.Log.Warn("filter: the node pumping a durable did not stop it", "stream", stream, "durable", durable, "err", err)
	}
}

// listenTakeover makes p's durable one the other nodes can take over.
func (f *Service) listenTakeover(p *sub) {
	if f.deps.NC == nil {
		return
	}
	take, err := f.deps.NC.Subscribe(takeSubject(p.stream, p.consumer), func(m *nats.Msg) {
		f.deps.Log.Info("filter taken over through another node", "stream", p.stream, "consumer", p.consumer)
		f.stop(p)
		_ = m.Respond(nil)
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
	}
}
