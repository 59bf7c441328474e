package broker

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/dlq"
	"github.com/semaq/semaq/semaq"
)

// Wiring of the dead-letter queue (internal/broker/dlq) into the node.

// dlqEvent is one message a consumer gave up on (dlq.Event), as the
// dispatcher reports it.
type dlqEvent struct {
	stream, consumer string
	seq, deliveries  uint64
	reason           string // max_deliveries, terminated or "terminated: <why>"
}

// storeDeadLetter stores a dead letter in SQ_DLQ ((*dlq.Store).Put).
func (s *Server) storeDeadLetter(ctx context.Context, ev dlqEvent, d *semaq.DeadLetter, hdr nats.Header, data []byte) (*jetstream.PubAck, error) {
	return s.dlq.Put(ctx, dlq.Event{Stream: ev.stream, Consumer: ev.consumer, Seq: ev.seq, Deliveries: ev.deliveries, Reason: ev.reason}, d, hdr, data)
}
