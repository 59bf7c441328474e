package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkFilteredConsume compares consuming through a broker-side filter
// with the plain pull consumer the SDK uses without one, and with a stock
// nats.go JetStream pull consumer on the same stream ("raw-js": no SemaQ
// code between the consumer and JetStream) as the baseline for ratios. Every message is
// received and acked (Msg.Ack waits for JetStream's confirmation). In
// "all", the filter matches every message, so both deliver the same
// messages; in "15%", a filtered subscriber reads one message in seven and
// msgs/s counts the stream messages behind them. vs-raw-js is msgs/s over
// raw-js's in the same run.
func BenchmarkFilteredConsume(b *testing.B) {
	var rawRate float64
	for _, bc := range []struct {
		name, filter string
		every        int  // one message in every is a match
		rawJS        bool // stock jetstream.Consumer, acked with DoubleAck
	}{
		{"raw-js", "", 1, true},
		{"raw", "", 1, false},
		{"filter-all", "payload.confidence >= 0.0", 1, false},
		{"filter-15%", "payload.confidence > 0.85", 7, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := brokertest.Start(b)
			c := brokertest.Connect(b, s)
			if _, err := c.AddStream(context.Background(), semaq.StreamConfig{Name: "B", Subjects: []string{"bench.>"}, Durability: "interval"}); err != nil {
				b.Fatal(err)
			}
			nc := c.Conn()
			for i := range b.N {
				conf := 0.5
				if i%bc.every == 0 {
					conf = 0.9
				}
				if err := nc.Publish("bench.x", fmt.Appendf(nil, `{"i": %d, "confidence": %g}`, i, conf)); err != nil {
					b.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for {
				info, err := c.StreamInfo(context.Background(), "B")
				if err != nil {
					b.Fatal(err)
				}
				if info.State.Messages == uint64(b.N) {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("stored %d of %d", info.State.Messages, b.N)
				}
				time.Sleep(10 * time.Millisecond)
			}
			want := (b.N + bc.every - 1) / bc.every
			var opts []client.SubscribeOption
			if bc.filter != "" {
				opts = append(opts, client.WithFilter(bc.filter))
			}
			ctx := context.Background()
			if bc.rawJS {
				rawRate = benchRawJS(b, nc, want)
				return
			}
			b.ReportAllocs()
			b.ResetTimer()
			sub, err := c.Subscribe(ctx, "bench.x", opts...)
			if err != nil {
				b.Fatal(err)
			}
			for range want {
				m, err := sub.Next(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Ack(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "msgs/s")
			if rawRate > 0 {
				b.ReportMetric(rate/rawRate, "vs-raw-js")
			}
			_ = sub.Close()
		})
	}
}

// benchRawJS consumes want messages of stream B with a plain nats.go
// JetStream pull consumer, acking each as Msg.Ack does (waiting for
// JetStream's confirmation), and returns msgs/s.
func benchRawJS(b *testing.B, nc *nats.Conn, want int) float64 {
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cons, err := js.CreateConsumer(ctx, "B", jetstream.ConsumerConfig{
		FilterSubject: "bench.x", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10000,
	})
	if err != nil {
		b.Fatal(err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(128))
	if err != nil {
		b.Fatal(err)
	}
	for range want {
		m, err := it.Next()
		if err != nil {
			b.Fatal(err)
		}
		if err := m.DoubleAck(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "msgs/s")
	it.Stop()
	if err := js.DeleteConsumer(ctx, "B", cons.CachedInfo().Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		b.Fatal(err)
	}
	return rate
}
