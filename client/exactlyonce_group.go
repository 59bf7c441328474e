package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/semaq"
)

// GroupInputs lets the processor commit the outputs of up to n
// consecutive inputs, already stored when it takes the first, as one
// atomic batch: on an R1 file stream each atomic batch costs JetStream a
// synced store of its own, which a group pays once. Each input's outputs
// are still stored together or not at all, with the same ids. The inputs
// after the first are read ahead, in order, through a consumer of their
// own; the durable consumer still holds one input at a time and is acked
// for each. The function may be called again for an input read ahead
// (one that failed, or did not fit in the batch). Default 1: no grouping.
func GroupInputs(n int) ProcessOption {
	return func(o *processOptions) error {
		if n < 1 || n > semaq.MaxBatchMsgs {
			return fmt.Errorf("client: GroupInputs: %d is outside 1..%d", n, semaq.MaxBatchMsgs)
		}
		o.group = n
		return nil
	}
}

// peeker reads the inputs after the durable consumer's, in stream order,
// through an ephemeral consumer without acks. Contiguous from its start:
// a delivery it missed (a gap in its consumer sequence) drops it, to be
// made again after the durable's current input.
type peeker struct {
	c       *Client
	stream  string
	subject string
	cons    jetstream.Consumer
	dseq    uint64 // the consumer sequence of its last delivery
	ahead   []*Msg // read, not yet taken into a group, in order
}

// after returns up to n inputs stored after seq, in order, as many as
// the peeker has or the broker hands it at once. An error of the read
// ahead is no error of the processor: the input goes alone.
func (pk *peeker) after(ctx context.Context, seq uint64, n int) []*Msg {
	i := 0
	for i < len(pk.ahead) && pk.ahead[i].Seq <= seq {
		i++
	}
	pk.ahead = pk.ahead[i:]
	if len(pk.ahead) < n {
		if err := pk.read(ctx, seq, n-len(pk.ahead)); err != nil {
			pk.reset()
			return nil
		}
	}
	return pk.ahead[:min(n, len(pk.ahead))]
}

// read fetches what is stored now, up to n, after seq.
func (pk *peeker) read(ctx context.Context, seq uint64, n int) error {
	if pk.cons == nil {
		ctx, cancel := pk.c.withTimeout(ctx)
		defer cancel()
		cons, err := pk.c.js.CreateConsumer(ctx, pk.stream, jetstream.ConsumerConfig{
			FilterSubject:     pk.subject,
			DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:       seq + 1,
			AckPolicy:         jetstream.AckNonePolicy,
			InactiveThreshold: time.Minute,
			MemoryStorage:     true,
		})
		if err != nil {
			return err
		}
		pk.cons, pk.dseq = cons, 0
	}
	batch, err := pk.cons.FetchNoWait(n)
	if err != nil {
		return err
	}
	var gap error
	for jm := range batch.Messages() {
		md, err := jm.Metadata()
		switch {
		case gap != nil:
			continue // drained, not kept
		case err != nil:
			gap = err
			continue
		case md.Sequence.Consumer != pk.dseq+1:
			gap = errors.New("a delivery missed")
			continue
		}
		pk.dseq = md.Sequence.Consumer
		if md.Sequence.Stream <= seq {
			continue
		}
		m, err := newMsg(pk.c, jm)
		if err != nil {
			gap = err
			continue
		}
		pk.ahead = append(pk.ahead, m)
	}
	if gap != nil {
		return gap
	}
	if err := batch.Error(); err != nil && !jsutil.NoMessage(err) {
		return err
	}
	return nil
}

// reset drops the consumer and what it read.
func (pk *peeker) reset() {
	if pk.cons != nil {
		ctx, cancel := context.WithTimeout(context.Background(), pk.c.timeout)
		defer cancel()
		_ = pk.c.js.DeleteConsumer(ctx, pk.stream, pk.cons.CachedInfo().Name)
	}
	pk.cons, pk.dseq, pk.ahead = nil, 0, nil
}

// extend adds to m's batch the inputs stored after it whose function
// succeeds and whose outputs fit, up to the group's size: nmsgs messages
// of size bytes are in it already. It returns the inputs added, their
// messages, and their spans, to end once the batch is committed.
func (p *processor) extend(ctx context.Context, m *Msg, nmsgs, size int) (ins []*Msg, msgs []*nats.Msg, spans []trace.Span) {
	if md, err := m.jm.Metadata(); err != nil || md.NumPending == 0 {
		return nil, nil, nil // nothing stored after it
	}
	limit := int(p.c.nc.MaxPayload() / 2)
	for _, in := range p.peek.after(ctx, m.Seq, p.o.group-1) {
		sctx, span := in.StartSpan(ctx, "process "+p.name)
		outs, err := p.fn(in)
		var b []*nats.Msg
		if err == nil && len(outs) > 0 {
			b, err = p.batch(sctx, in, outs)
		}
		n := batchSize(b)
		if err != nil || nmsgs+len(b) > semaq.MaxBatchMsgs || size+n > limit {
			span.End() // met again on its own delivery
			break
		}
		ins, msgs, spans = append(ins, in), append(msgs, b...), append(spans, span)
		nmsgs, size = nmsgs+len(b), size+n
	}
	return ins, msgs, spans
}

// batchSize is about what msgs take in a batch frame.
func batchSize(msgs []*nats.Msg) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Subject) + len(m.Data) + 8
		for k, vs := range m.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
	}
	return n
}
