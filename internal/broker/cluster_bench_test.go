package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkClusterIngest measures ingest on 3 in-process nodes: SemaQ (a
// public publisher through the ingress) against raw JetStream (the node's
// operator writing into the same stream's storage subject, no ingress), for
// each node sync mode (interval; always, which is JetStream's sync_always on
// a cluster) and each replica count, 1 and 3. Publishers connect to a node
// that does not lead the stream, as two clients in three do. Per case:
//
//   - async: publishes with at most 256 unacknowledged; msgs/s, and for
//     SemaQ x-raw, its throughput as a multiple of raw's in the same run;
//   - seq: one publish at a time; p50-µs and p99-µs publish→ack, and for
//     SemaQ p50-x-raw and p99-x-raw.
//
// 1 KiB messages with an inference envelope (model, tenant, priority,
// prompt tokens), no traceparent. Run with a fixed count of messages, e.g.
// -benchtime 3000x: a cluster takes seconds to start.
func BenchmarkClusterIngest(b *testing.B) {
	for _, sync := range []string{broker.SyncInterval, broker.SyncAlways} {
		b.Run("sync="+sync, func(b *testing.B) {
			c := brokertest.StartCluster(b, 3, func(cfg *broker.Config) { cfg.Sync = sync })
			for _, replicas := range []int{1, 3} {
				b.Run(fmt.Sprintf("R%d", replicas), func(b *testing.B) { benchClusterStream(b, c, replicas) })
			}
		})
	}
}

func benchClusterStream(b *testing.B, c *brokertest.Cluster, replicas int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name := fmt.Sprintf("BENCH_R%d", replicas)
	subject := fmt.Sprintf("bench.r%d.ingest", replicas)
	admin := brokertest.Connect(b, c.Node(0))
	if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: name, Subjects: []string{fmt.Sprintf("bench.r%d.>", replicas)}, Replicas: replicas}); err != nil {
		b.Fatal(err)
	}
	leader := -1
	c.Eventually(30*time.Second, name+" to have a leader", func() error {
		if leader = c.StreamLeader(name); leader < 0 {
			return errors.New("no leader")
		}
		return nil
	})
	via := c.Node((leader + 1) % c.N())

	semaqConn := brokertest.Connect(b, via).Conn()
	rawConn, err := brokertest.DialOperator(via)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rawConn.Close)
	targets := []struct {
		name    string
		nc      *nats.Conn
		subject string
	}{
		{"raw", rawConn, reserved.StoragePrefix + subject},
		{"semaq", semaqConn, subject},
	}
	// The publishing node learns of the stream from JetStream's advisory.
	c.Eventually(30*time.Second, "the ingress of the publishing node to serve "+name, func() error {
		_, err := semaqConn.Request(subject, []byte(`{}`), 5*time.Second)
		return err
	})

	var rawMsgsPerSec, rawP50, rawP99 float64
	for _, t := range targets {
		b.Run(t.name+"/async", func(b *testing.B) {
			msgsPerSec := benchClusterAsync(b, t.nc, t.subject)
			if t.name == "raw" {
				rawMsgsPerSec = msgsPerSec
			} else if rawMsgsPerSec > 0 {
				b.ReportMetric(msgsPerSec/rawMsgsPerSec, "x-raw")
			}
		})
	}
	for _, t := range targets {
		b.Run(t.name+"/seq", func(b *testing.B) {
			p50, p99 := benchClusterSeq(b, t.nc, t.subject)
			if t.name == "raw" {
				rawP50, rawP99 = p50, p99
			} else if rawP50 > 0 {
				b.ReportMetric(p50/rawP50, "p50-x-raw")
				b.ReportMetric(p99/rawP99, "p99-x-raw")
			}
		})
	}
}

func clusterBenchMsg(subject string) *nats.Msg {
	h := nats.Header{semaq.HdrModel: {"llama3-70b-instruct"}, semaq.HdrTenant: {"acme-prod"}, semaq.HdrPriority: {semaq.PriorityHigh.String()}, semaq.HdrPromptTokens: {"512"}}
	return &nats.Msg{Subject: subject, Header: h, Data: make([]byte, 1024)}
}

// benchClusterAsync publishes b.N messages with at most 256 unacknowledged
// and returns the rate at which they were acknowledged.
func benchClusterAsync(b *testing.B, nc *nats.Conn, subject string) float64 {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
	if err != nil {
		b.Fatal(err)
	}
	msg := clusterBenchMsg(subject)
	b.SetBytes(int64(len(msg.Data)))
	start := time.Now()
	for b.Loop() {
		for {
			_, err := js.PublishMsgAsync(msg)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			break
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatalf("%d messages unacknowledged", js.PublishAsyncPending())
	}
	rate := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(rate, "msgs/s")
	return rate
}

// benchClusterSeq publishes b.N messages one at a time and returns the
// median and 99th percentile publish→ack time in µs.
func benchClusterSeq(b *testing.B, nc *nats.Conn, subject string) (p50, p99 float64) {
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	msg := clusterBenchMsg(subject)
	ctx := context.Background()
	took := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	at := func(q float64) float64 {
		return float64(took[min(len(took)-1, int(q*float64(len(took))))]) / float64(time.Microsecond)
	}
	p50, p99 = at(0.50), at(0.99)
	b.ReportMetric(p50, "p50-µs")
	b.ReportMetric(p99, "p99-µs")
	return p50, p99
}
