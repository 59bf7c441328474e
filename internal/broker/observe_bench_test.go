package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/internal/telemetry/otlptest"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkIngressObserved measures async publishes with the broker's
// observability: raw JetStream (the internal user writing to storage
// directly, no ingress), the ingress with its metrics (always on; one
// message in 32 timed to its ack), and the ingress with tracing on for
// messages with and without a sampled traceparent. Each case after the
// first reports its cost as a multiple of raw JetStream in the same run
// (x-raw).
func BenchmarkIngressObserved(b *testing.B) {
	var rawNs float64
	for _, bc := range []struct {
		name    string
		raw     bool
		tracing bool
		parent  bool
	}{
		{name: "raw-jetstream", raw: true},
		{name: "ingress+metrics"},
		{name: "ingress+metrics+tracing/no-traceparent", tracing: true},
		{name: "ingress+metrics+tracing/sampled-traceparent", tracing: true, parent: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var opts []func(*broker.Config)
			if bc.tracing {
				rcv := otlptest.Start(b)
				opts = append(opts, func(cfg *broker.Config) { cfg.OTLPEndpoint = rcv.URL() })
			}
			s := brokertest.Start(b, opts...)
			c := brokertest.Connect(b, s)
			js, subject := benchPublisher(b, s, c, bc.raw)
			msg := func(i int) *nats.Msg {
				h := nats.Header{semaq.HdrModel: {"llama3-70b"}, semaq.HdrTenant: {"acme"}, semaq.HdrPromptTokens: {"512"}}
				if bc.parent {
					h[semaq.HdrTraceParent] = []string{fmt.Sprintf("00-4bf92f3577b34da6a3ce929d%06x-00f067aa0ba902b7-01", i&0xffffff)}
				}
				return &nats.Msg{Subject: subject, Data: make([]byte, 256), Header: h}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := js.PublishMsgAsync(msg(i)); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("acks missing")
			}
			b.StopTimer()
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if bc.raw {
				rawNs = ns
			} else if rawNs > 0 {
				b.ReportMetric(ns/rawNs, "x-raw")
			}
		})
	}
}

// benchPublisher makes a memory stream AI on ai.> and returns an async
// JetStream publisher and its subject: through the ingress on c, or, raw,
// straight into storage as the node's operator.
func benchPublisher(b *testing.B, s *broker.Server, c *client.Client, raw bool) (jetstream.JetStream, string) {
	b.Helper()
	if _, err := c.AddStream(context.Background(), semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}, Storage: "memory"}); err != nil {
		b.Fatal(err)
	}
	nc := c.Conn()
	subject := "ai.inference.llm"
	if raw {
		var err error
		if nc, err = brokertest.DialOperator(s); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		subject = reserved.StoragePrefix + subject
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	return js, subject
}
