package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// The exactly-once recipe for a stock client (docs/exactly-once.md): an
// atomic batch sent again with the same message ids is refused whole with
// JetStream's error 10201, as straight into JetStream, which the client
// takes for "committed already"; nothing is stored twice.
func TestStockAtomicBatchReplayRefused10201(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokertest.AddStream(t, c, "EOS", "eos.>")
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	batch := func() []*nats.Msg {
		return []*nats.Msg{
			batchMsg("eos.a", "a", semaq.HdrMsgID, "IN:7:0", semaq.HdrSourceStream, "IN", semaq.HdrSourceSeq, "7"),
			batchMsg("eos.b", "b", semaq.HdrMsgID, "IN:7:1", semaq.HdrSourceStream, "IN", semaq.HdrSourceSeq, "7"),
		}
	}
	if _, err := jetstreamext.PublishMsgBatch(ctx, js, batch()); err != nil {
		t.Fatal(err)
	}
	_, err = jetstreamext.PublishMsgBatch(ctx, js, batch())
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10201 {
		t.Fatalf("replayed batch: %#v, want JetStream's error 10201", err)
	}
	info, err := c.StreamInfo(ctx, "EOS")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Messages != 2 {
		t.Fatalf("EOS holds %d messages, want 2", info.State.Messages)
	}
}
