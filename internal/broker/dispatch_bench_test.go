package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkDispatchDrain measures one worker draining a backlog in batches
// of 64, acking each job: through the dispatcher, and from a raw JetStream
// workqueue stream with a pull consumer on the same broker; acks confirmed
// (Ack vs DoubleAck) or not (AckNoWait vs Ack). Compare ns/op of semaq and
// jetstream under the same ack mode.
func BenchmarkDispatchDrain(b *testing.B) {
	for _, confirmed := range []bool{true, false} {
		name := "ack=confirmed"
		if !confirmed {
			name = "ack=nowait"
		}
		b.Run(name, func(b *testing.B) { benchDrain(b, confirmed) })
	}
}

func benchDrain(b *testing.B, confirmed bool) {
	const batch = 64
	payload := make([]byte, 512)
	b.Run("semaq", func(b *testing.B) {
		s := brokertest.Start(b)
		c := brokertest.Connect(b, s)
		ctx := context.Background()
		if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "Q", Subjects: []string{"infer.>"}, MaxMessages: 10_000_000}); err != nil {
			b.Fatal(err)
		}
		nc, _ := nats.Connect(s.ClientURL())
		defer nc.Close()
		js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
		for range b.N {
			if _, err := js.PublishAsync("infer.x", payload, jetstream.WithStallWait(30*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		for {
			qi, err := c.QueueInfo(ctx, "Q")
			if err != nil {
				b.Fatal(err)
			}
			if qi.Status.Queued == b.N {
				break
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for done := 0; done < b.N; {
			jobs, err := c.Fetch(ctx, "Q", client.FetchMax(batch))
			if err != nil {
				b.Fatal(err)
			}
			for _, j := range jobs {
				ack := j.AckNoWait
				if confirmed {
					ack = func(...client.AckOption) error { return j.Ack(ctx) }
				}
				if err := ack(); err != nil {
					b.Fatal(err)
				}
			}
			done += len(jobs)
		}
	})
	b.Run("jetstream", func(b *testing.B) {
		s := brokertest.Start(b)
		nc, err := brokertest.DialOperator(s)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		ctx := context.Background()
		js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
		st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Retention: jetstream.WorkQueuePolicy})
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			if _, err := js.PublishAsync("raw.x", payload, jetstream.WithStallWait(30*time.Second)); err != nil {
				b.Fatal(err)
			}
		}
		<-js.PublishAsyncComplete()
		cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for done := 0; done < b.N; {
			msgs, err := cons.FetchNoWait(batch)
			if err != nil {
				b.Fatal(err)
			}
			for m := range msgs.Messages() {
				ack := m.Ack
				if confirmed {
					ack = func() error { return m.DoubleAck(ctx) }
				}
				if err := ack(); err != nil {
					b.Fatal(err)
				}
				done++
			}
		}
	})
}
