package broker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/node"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkDurablePathNoDisk is a sequential publish (one in flight, as
// at a low rate) to an fsync stream and to an interval stream of the same
// broker, with the group commit's fsync replaced by nothing: ns/op of
// fsync minus interval is what the durable path adds besides the fsync
// itself (the ack's trips through the ingress's reader, the committer's
// goroutine and the egress connection), whatever the disk is doing.
func BenchmarkDurablePathNoDisk(b *testing.B) {
	cfg := broker.DefaultConfig()
	cfg.DataDir = b.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	s, err := node.New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	broker.SetSyncHook(s, func(*os.File) error { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	c := brokertest.Connect(b, s)
	data := make([]byte, 1024)
	for _, durability := range []string{broker.DurabilityInterval, broker.DurabilityFsync} {
		subject := "bench." + durability
		if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "BENCH_" + durability, Subjects: []string{subject}, Durability: durability}); err != nil {
			b.Fatal(err)
		}
		b.Run(durability, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Publish(ctx, subject, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
