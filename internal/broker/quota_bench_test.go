package broker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkIngressQuota measures async publishes through the ingress with
// quotas off (the default), and with a tenant's rpm and tpm checked on
// every message (limits high enough that none is refused), each as a
// multiple of raw JetStream in the same run (x-raw).
func BenchmarkIngressQuota(b *testing.B) {
	var rawNs float64
	for _, bc := range []struct {
		name   string
		raw    bool
		quotas quota.Config
	}{
		{name: "raw-jetstream", raw: true},
		{name: "ingress/quotas-off"},
		{name: "ingress/tenant-rpm+tpm", quotas: quota.Config{Default: quota.Limits{RPM: 1 << 40, TPM: 1 << 50}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := brokertest.Start(b, func(c *broker.Config) { c.Quotas = bc.quotas })
			c := brokertest.Connect(b, s)
			js, subject := benchPublisher(b, s, c, bc.raw)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				h := nats.Header{semaq.HdrModel: {"llama3-70b"}, semaq.HdrTenant: {"acme"}, semaq.HdrPromptTokens: {"512"}}
				if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: make([]byte, 256), Header: h}, jetstream.WithStallWait(10*time.Second)); err != nil {
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
