package broker

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/dlq"
	"github.com/semaq/semaq/semaq"
)

// Wiring of the dead-letter queue (internal/broker/dlq) into the node.

// startDLQ makes sure SQ_DLQ exists and follows the advisories. The API
// handlers are served by startAPI (dlqHandlers).
func (s *Server) startDLQ(ctx context.Context) error {
	d, err := dlq.Open(ctx, dlq.Deps{
		Log:           s.log,
		JS:            s.js,
		Replicas:      s.ownReplicas(),
		Conn:          s.nc,
		IsSemaqStream: isSemaqStream,
		OnDeadLetter:  s.metrics.DeadLetter,
		OnRefused:     s.metrics.DLQAdvisoryRefused,
		Audit:         s.audit,
	})
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	s.dlq = d
	return nil
}

// stopDLQ stops following the advisories.
func (s *Server) stopDLQ(ctx context.Context) error {
	if s.dlq == nil {
		return nil
	}
	return s.dlq.Close(ctx)
}

// dlqHandlers serves the dead-letter API on $SQ.API.DLQ.*.
func (s *Server) dlqHandlers() api.Handlers {
	if s.dlq == nil {
		return api.Handlers{}
	}
	return s.dlq.Handlers()
}

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
