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
// that does not lead the stream, as two clients in three do. Each case
// publishes b.N messages per target in 4 rounds, raw and SemaQ alternating
// (raw first in rounds 1 and 3, SemaQ first in 2 and 4), so both meet the
// same moments of a shared machine:
//
//   - async: at most 256 unacknowledged; msgs/s of each, and x-raw, SemaQ's
//     throughput as a multiple of raw's;
//   - seq: one publish at a time; p50 and p99 publish→ack in µs of each, and
//     SemaQ's minus raw's.
//
// 1 KiB messages with an inference envelope (model, tenant, priority,
// prompt tokens), no traceparent. Run with a fixed count of messages, e.g.
// -benchtime 4000x: a cluster takes seconds to start.
func BenchmarkClusterIngest(b *testing.B) {
	for _, sync := range []string{broker.SyncInterval, broker.SyncAlways} {
		b.Run("sync="+sync, func(b *testing.B) {
			c := brokertest.StartCluster(b, 3, func(cfg *broker.Config) { cfg.Sync = sync })
			for _, replicas := range []int{1, 3} {
				b.Run(fmt.Sprintf("R%d", replicas), func(b *testing.B) {
					targets := clusterTargets(b, c, replicas)
					b.Run("async", func(b *testing.B) { benchClusterAsync(b, targets) })
					b.Run("seq", func(b *testing.B) { benchClusterSeq(b, targets) })
				})
			}
		})
	}
}

// clusterTarget is one way into the benchmark's stream.
type clusterTarget struct {
	nc      *nats.Conn
	subject string
}

// clusterTargets makes an R<replicas> stream and returns raw JetStream's
// way into it, then SemaQ's, both through a node that does not lead it.
func clusterTargets(b *testing.B, c *brokertest.Cluster, replicas int) [2]clusterTarget {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
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
	// The publishing node learns of the stream from JetStream's advisory.
	c.Eventually(30*time.Second, "the ingress of the publishing node to serve "+name, func() error {
		_, err := semaqConn.Request(subject, []byte(`{}`), 5*time.Second)
		return err
	})
	return [2]clusterTarget{{rawConn, reserved.StoragePrefix + subject}, {semaqConn, subject}}
}

func clusterBenchMsg(subject string) *nats.Msg {
	h := nats.Header{semaq.HdrModel: {"llama3-70b-instruct"}, semaq.HdrTenant: {"acme-prod"}, semaq.HdrPriority: {semaq.PriorityHigh.String()}, semaq.HdrPromptTokens: {"512"}}
	return &nats.Msg{Subject: subject, Header: h, Data: make([]byte, 1024)}
}

// clusterRounds runs b.N messages per target in 4 rounds, alternating which
// target goes first; do publishes n messages to target t.
func clusterRounds(b *testing.B, do func(t, n int)) {
	b.StopTimer()
	for round := range 4 {
		n := b.N / 4
		if round == 3 {
			n = b.N - 3*(b.N/4)
		}
		first := round % 2
		do(first, n)
		do(1-first, n)
	}
}

// benchClusterAsync publishes with at most 256 unacknowledged and reports
// the rate at which each target's messages were acknowledged.
func benchClusterAsync(b *testing.B, targets [2]clusterTarget) {
	var js [2]jetstream.JetStream
	var msgs [2]*nats.Msg
	for i, t := range targets {
		var err error
		if js[i], err = jetstream.New(t.nc, jetstream.WithPublishAsyncMaxPending(256)); err != nil {
			b.Fatal(err)
		}
		msgs[i] = clusterBenchMsg(t.subject)
	}
	var took [2]time.Duration
	clusterRounds(b, func(t, n int) {
		start := time.Now()
		for range n {
			for {
				_, err := js[t].PublishMsgAsync(msgs[t])
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
		case <-js[t].PublishAsyncComplete():
		case <-time.After(time.Minute):
			b.Fatalf("%d messages unacknowledged", js[t].PublishAsyncPending())
		}
		took[t] += time.Since(start)
	})
	raw, sq := float64(b.N)/took[0].Seconds(), float64(b.N)/took[1].Seconds()
	b.ReportMetric(raw, "raw-msgs/s")
	b.ReportMetric(sq, "semaq-msgs/s")
	b.ReportMetric(sq/raw, "x-raw")
}

// benchClusterSeq publishes one message at a time and reports each
// target's median and 99th percentile publish→ack time.
func benchClusterSeq(b *testing.B, targets [2]clusterTarget) {
	var js [2]jetstream.JetStream
	var msgs [2]*nats.Msg
	for i, t := range targets {
		var err error
		if js[i], err = jetstream.New(t.nc); err != nil {
			b.Fatal(err)
		}
		msgs[i] = clusterBenchMsg(t.subject)
	}
	ctx := context.Background()
	var took [2][]time.Duration
	clusterRounds(b, func(t, n int) {
		for range n {
			start := time.Now()
			if _, err := js[t].PublishMsg(ctx, msgs[t]); err != nil {
				b.Fatal(err)
			}
			took[t] = append(took[t], time.Since(start))
		}
	})
	var p50, p99 [2]float64
	for t := range took {
		slices.Sort(took[t])
		at := func(q float64) float64 {
			return float64(took[t][min(len(took[t])-1, int(q*float64(len(took[t]))))]) / float64(time.Microsecond)
		}
		p50[t], p99[t] = at(0.50), at(0.99)
	}
	b.ReportMetric(p50[0], "raw-p50-µs")
	b.ReportMetric(p99[0], "raw-p99-µs")
	b.ReportMetric(p50[1], "semaq-p50-µs")
	b.ReportMetric(p99[1], "semaq-p99-µs")
	b.ReportMetric(p50[1]-p50[0], "p50-added-µs")
	b.ReportMetric(p99[1]-p99[0], "p99-added-µs")
}
