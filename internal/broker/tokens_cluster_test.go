package broker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A job's token stream written by a worker connected to a node that does
// not dispatch the queue: the worker's records reach that node's relay,
// which learns the job's binding from the dispatcher's node; the stream is
// stored under the job's tenant and read, in full and in order, through a
// third node. A writer that claimed the id on the worker's node first is
// purged there, as on one node (docs/tokens.md, Claims: in a cluster).
func TestClusterTokenStreamFromAFarWorker(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := brokertest.Connect(t, c.Node(0))
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "TQ", Subjects: []string{"chat.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	js := clusterJS(t, c.Node(0))
	lead := queueLeader(t, c, js, "TQ")
	far := others(c, lead)
	pubC, workC, leadC := brokertest.Connect(t, far[0]), brokertest.Connect(t, far[1]), brokertest.Connect(t, c.Node(lead))
	forgerNC, err := nats.Connect(far[1].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer forgerNC.Close()

	for n, worker := range []*client.Client{workC, leadC} {
		id := []string{"far-1", "near-1"}[n]
		c.Eventually(30*time.Second, "a far node's ingress to take "+id, func() error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := pubC.Publish(ctx, "chat.x", []byte(`{}`), client.WithMsgID(id), client.WithTenant("acme"))
			return err
		})
		// For the far worker, someone on its node writes first, claiming
		// the id on that node's relay: the job's binding, told to every
		// node, takes the stream back for the lease holder.
		if n == 0 {
			forged := nats.NewMsg(semaq.TokenWriteChunkSubject(id))
			forged.Header.Set(semaq.HdrTokenKey, "forger-key-0123456789")
			forged.Header.Set(semaq.HdrTenant, "acme")
			forged.Data = semaq.AppendTokenChunk(nil, &semaq.TokenChunk{Seq: 1, N: 1, Text: "FORGED"})
			if ack, err := forgerNC.RequestMsg(forged, 10*time.Second); err != nil || strings.Contains(string(ack.Data), `"error"`) {
				t.Fatalf("%s: the forger's first record: %v", id, err)
			}
		}
		waitQueued(t, worker, "TQ", 1)
		jobs := fetch(t, worker, "TQ")
		if len(jobs) != 1 || jobs[0].ID != id {
			t.Fatalf("fetched %v, want %s", ids(jobs), id)
		}
		w, err := jobs[0].OpenTokenStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []string{"one", " two", " three"} {
			if err := w.Write(ctx, tok); err != nil {
				t.Fatalf("%s: write: %v", id, err)
			}
		}
		if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
			t.Fatalf("%s: close: %v", id, err)
		}
		if err := jobs[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		// (A reader that started before the forger could have seen its
		// record before the purge: docs/tokens.md, Claims.)
		rd, err := pubC.ReadTokens(ctx, id, client.ForTenant("acme"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := rd.Collect(ctx)
		rd.Close()
		if err != nil || res.Text != "one two three" || res.Final.FinishReason != "stop" {
			t.Fatalf("%s read through a third node: %+v, %v", id, res, err)
		}
		// Stored under the job's tenant, where a reader of another cannot
		// see it.
		st, err := js.Stream(ctx, semaq.TokenStream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, semaq.TokenSubjectFilter(semaq.TokenAnyTenant, id))
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != semaq.TokenEndSubject("acme", id) {
			t.Fatalf("%s's last record on %s, want %s", id, m.Subject, semaq.TokenEndSubject("acme", id))
		}
		again, err := brokertest.Connect(t, c.Node(lead)).ReadTokens(ctx, id, client.ForTenant("acme"))
		if err != nil {
			t.Fatal(err)
		}
		if res, err := again.Collect(ctx); err != nil || res.Text != "one two three" {
			t.Fatalf("%s replayed: %+v, %v", id, res, err)
		}
		again.Close()
	}
}
