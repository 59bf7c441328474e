package broker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Batches through every node of a cluster into an R3 stream: each message
// stored once on every replica, a batch's messages at consecutive
// sequences, a batch sent again all duplicates.
func TestClusterBatches(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c1 := brokertest.Connect(t, c.Node(0))
	if _, err := c1.AddStream(ctx, semaq.StreamConfig{Name: "CB", Subjects: []string{"cb.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	const n = 10
	batch := func(node int, kind string) []*nats.Msg {
		ms := make([]*nats.Msg, n)
		for i := range ms {
			ms[i] = batchMsg(fmt.Sprintf("cb.n%d.%s", node, kind), fmt.Sprintf(`{"i":%d}`, i), semaq.HdrMsgID, fmt.Sprintf("n%d-%s-%d", node, kind, i))
		}
		return ms
	}
	seen := map[uint64]string{}
	take := func(what string, ack *semaq.BatchAck) {
		t.Helper()
		if ack.Stored != n {
			t.Fatalf("%s: %d stored, want %d: %v", what, ack.Stored, n, ack.Err())
		}
		for i, r := range ack.Results {
			if r.Stream != "CB" || r.Duplicate || r.Sequence != ack.Results[0].Sequence+uint64(i) {
				t.Fatalf("%s: result %d: %+v, want the %dth sequence after %d", what, i, r.PubAck, i, ack.Results[0].Sequence)
			}
			if other, ok := seen[r.Sequence]; ok {
				t.Fatalf("%s: sequence %d given to %s too", what, r.Sequence, other)
			}
			seen[r.Sequence] = what
		}
	}
	for i, s := range c.Nodes() {
		cl := brokertest.Connect(t, s)
		// A node learns of a stream made through another from JetStream's
		// advisory; until then its ingress refuses the subject, and the
		// atomic batch stores nothing.
		var ack *semaq.BatchAck
		c.Eventually(30*time.Second, fmt.Sprintf("n%d to take an atomic batch", i+1), func() error {
			var err error
			ack, err = cl.PublishBatch(ctx, batch(i+1, "atomic"), client.Atomic())
			return err
		})
		take(fmt.Sprintf("n%d atomic", i+1), ack)
		ack, err := cl.PublishBatch(ctx, batch(i+1, "fast"))
		if err != nil {
			t.Fatal(err)
		}
		take(fmt.Sprintf("n%d fast", i+1), ack)
		// The same messages again: every one a duplicate of itself.
		again, err := cl.PublishBatch(ctx, batch(i+1, "fast"))
		if err != nil {
			t.Fatal(err)
		}
		for k, r := range again.Results {
			if !r.Duplicate || r.Sequence != ack.Results[k].Sequence {
				t.Fatalf("n%d fast again: result %d: %+v, want a duplicate of %d", i+1, k, r.PubAck, ack.Results[k].Sequence)
			}
		}
	}
	want := uint64(6 * n)
	for i, s := range c.Nodes() {
		st, err := internalJS(t, s).Stream(ctx, "CB")
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().State; got.Msgs != want || got.FirstSeq != 1 || got.LastSeq != want {
			t.Fatalf("CB through n%d: %d messages, %d to %d; want 1 to %d", i+1, got.Msgs, got.FirstSeq, got.LastSeq, want)
		}
	}
	// Every replica holds every message, once: read each one's own copy.
	c.Eventually(30*time.Second, "every replica to hold the batches", func() error {
		for i, s := range c.Nodes() {
			got, err := replicaMsgs(s, "CB")
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("n%d holds %d messages, want %d", i+1, got, want)
			}
		}
		return nil
	})
	if _, err := c1.PublishBatch(ctx, []*nats.Msg{batchMsg("cb.x", "a"), batchMsg("elsewhere.x", "b")}, client.Atomic()); !errors.Is(err, semaq.ErrBatchRefused) {
		t.Fatalf("atomic batch with a message of no stream: %v", err)
	}
}

// replicaMsgs is how many messages s's own replica of stream holds.
func replicaMsgs(s *broker.Server, stream string) (uint64, error) {
	jsz, err := s.NATSServer().Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return 0, err
	}
	for _, a := range jsz.AccountDetails {
		for _, st := range a.Streams {
			if st.Name == stream {
				return st.State.Msgs, nil
			}
		}
	}
	return 0, fmt.Errorf("%s has no replica of %s", s.Config().Name, stream)
}
