package broker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// TestServeIntentDeadAgent: an agent that dies holding an intent message
// unacked (its connection drops, its heartbeats stop) loses it to the other
// agent of the intent after the ack wait, and leaves the table after its
// TTL.
func TestServeIntentDeadAgent(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	deadConn := brokertest.Connect(t, s)
	if _, err := deadConn.Announce(ctx, semaq.Agent{ID: "dead", Intents: []string{"summarize"}}, time.Second); err != nil {
		t.Fatal(err)
	}
	// WithAckWait applies when the intent's durable is created, here.
	dead, err := deadConn.ServeIntent(ctx, "ai.tasks", "summarize", client.WithPrefetch(1), client.WithAckWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, c, "ai.tasks", `{"doc":1}`, client.WithIntent("summarize"))
	m := nextIntent(t, dead)
	if string(m.Data) != `{"doc":1}` || m.NumDelivered != 1 {
		t.Fatalf("dead agent got %s (delivery %d)", m.Data, m.NumDelivered)
	}
	deadConn.Close() // dies: no ack, no leave, no more heartbeats

	aliveConn := brokertest.Connect(t, s)
	alive, err := aliveConn.ServeIntent(ctx, "ai.tasks", "summarize", client.WithPrefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	defer alive.Close()
	an, err := aliveConn.Announce(ctx, semaq.Agent{ID: "alive", Intents: []string{"summarize"}}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer an.Leave(context.Background())

	got := nextIntent(t, alive)
	if string(got.Data) != `{"doc":1}` || got.Seq != m.Seq || got.NumDelivered < 2 {
		t.Fatalf("alive agent got %s seq %d (delivery %d), want the dead agent's seq %d redelivered", got.Data, got.Seq, got.NumDelivered, m.Seq)
	}
	if err := got.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids := agentIDs(t, c)
		if slices.Equal(ids, []string{"alive"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agents %v, want [alive] once the dead one's TTL passed", ids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
