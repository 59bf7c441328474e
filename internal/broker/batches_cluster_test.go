package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

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
	// A stock client's atomic batches: the NATS server hands their
	// messages to every node's ingress, and the node of the client's
	// connection holds and commits each batch whole.
	const stockBatches = 3
	for i, s := range c.Nodes() {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		for b := range stockBatches {
			ack, err := jetstreamext.PublishMsgBatch(ctx, js, batch(i+1, fmt.Sprintf("stock%d", b)))
			if err != nil {
				t.Fatalf("n%d stock batch %d: %v", i+1, b, err)
			}
			if ack.Stream != "CB" || ack.BatchSize != n {
				t.Fatalf("n%d stock batch %d: %+v", i+1, b, ack)
			}
			for k := range uint64(n) {
				seq := ack.Sequence - uint64(n) + 1 + k
				if other, ok := seen[seq]; ok {
					t.Fatalf("n%d stock batch %d: sequence %d given to %s too", i+1, b, seq, other)
				}
				seen[seq] = fmt.Sprintf("n%d stock %d", i+1, b)
			}
		}
	}
	// A batch with a message missing: the commit waits a moment for it
	// (it may be on its way through another node), then refuses the batch.
	gapped, err := nats.Connect(c.Node(1).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer gapped.Close()
	send := func(seq int, commit bool) *nats.Msg {
		m := batchMsg("cb.gap", "x", semaq.HdrBatchID, "gap-1", semaq.HdrBatchSeq, fmt.Sprint(seq))
		if commit {
			m.Header.Set(semaq.HdrBatchCommit, "1")
		}
		r, err := gapped.RequestMsgWithContext(ctx, m)
		if err != nil {
			t.Fatalf("batch message %d: %v", seq, err)
		}
		return r
	}
	if r := send(1, false); len(r.Data) != 0 {
		t.Fatalf("message 1's flow-control ack: %s", r.Data)
	}
	if r := send(3, true); !strings.Contains(string(r.Data), `"err_code":20151`) || !strings.Contains(string(r.Data), "2 of its 3 messages came") {
		t.Fatalf("a commit with message 2 missing: %s", r.Data)
	}
	want := uint64((6 + 3*stockBatches) * n)
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
