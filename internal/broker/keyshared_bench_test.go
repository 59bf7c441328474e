package broker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkKeySharedConsume consumes b.N messages over 64 session keys
// through a key-shared group of 1 and 2 members, each on its own
// connection, and with a stock nats.go JetStream pull consumer (raw-js) on
// the same data. Every message is acked with JetStream's confirmation.
// vs-raw-js is msgs/s over raw-js's in the same run.
func BenchmarkKeySharedConsume(b *testing.B) {
	var rawRate float64
	for _, bc := range []struct {
		name    string
		members int // 0: raw-js
	}{
		{"raw-js", 0},
		{"keyshared-1", 1},
		{"keyshared-2", 2},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := brokertest.Start(b)
			c := brokertest.Connect(b, s)
			ctx := context.Background()
			if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "B", Subjects: []string{"bench.>"}, Durability: "interval"}); err != nil {
				b.Fatal(err)
			}
			nc := c.Conn()
			for i := range b.N {
				m := nats.NewMsg("bench.x")
				m.Header.Set(semaq.HdrSession, fmt.Sprintf("s-%d", i%64))
				m.Data = fmt.Appendf(nil, `{"i": %d}`, i)
				if err := nc.PublishMsg(m); err != nil {
					b.Fatal(err)
				}
			}
			waitStored(b, c, "B", b.N)
			if bc.members == 0 {
				rawRate = benchRawJS(b, nc, b.N)
				return
			}
			subs := make([]*client.Subscription, bc.members)
			for i := range subs {
				mc := brokertest.Connect(b, s)
				sub, err := mc.SubscribeKeyShared(ctx, "bench.x", "g", client.KeyBy("session"), client.WithMember(fmt.Sprintf("m%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				subs[i] = sub
			}
			b.ReportAllocs()
			b.ResetTimer()
			var done atomic.Int64
			runCtx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for _, sub := range subs {
				wg.Go(func() {
					for {
						m, err := sub.Next(runCtx)
						if err != nil {
							return
						}
						if err := m.Ack(ctx); err != nil {
							b.Error(err)
							return
						}
						if done.Add(1) == int64(b.N) {
							cancel()
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			cancel()
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "msgs/s")
			if rawRate > 0 {
				b.ReportMetric(rate/rawRate, "vs-raw-js")
			}
			for _, sub := range subs {
				_ = sub.Close()
			}
		})
	}
}

// waitStored waits until stream holds n messages.
func waitStored(b *testing.B, c *client.Client, stream string, n int) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := c.StreamInfo(context.Background(), stream)
		if err != nil {
			b.Fatal(err)
		}
		if info.State.Messages == uint64(n) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("stored %d of %d", info.State.Messages, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
