package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

type evenMsg struct {
	I    int  `json:"i"`
	Even bool `json:"even"`
}

// publishEvens publishes i from..to-1 as {"i": i, "even": i%2 == 0}.
func publishEvens(t *testing.T, c *client.Client, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		publishAcked(t, c, "f.x", fmt.Sprintf(`{"i": %d, "even": %v}`, i, i%2 == 0), fmt.Sprintf("f-%d", i))
	}
}

// publishAcked publishes as a client riding out a failover does: a publish
// not acked in time (a stream electing a new leader after a node stopped)
// is sent again under the same Nats-Msg-Id, so it is stored once, for at
// most a minute.
func publishAcked(t *testing.T, c *client.Client, subject, data, id string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.Publish(ctx, subject, []byte(data), client.WithMsgID(id))
		cancel()
		if err == nil {
			return
		}
		if !errors.Is(err, context.DeadlineExceeded) || time.Now().After(deadline) {
			t.Fatalf("publish %s to %s: %v", id, subject, err)
		}
	}
}

func nextEven(t *testing.T, sub *client.Subscription, timeout time.Duration) (*client.Msg, evenMsg) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	var v evenMsg
	if err := json.Unmarshal(m.Data, &v); err != nil {
		t.Fatalf("seq %d: %v", m.Seq, err)
	}
	if !v.Even {
		t.Fatalf("the filter let through %s", m.Data)
	}
	return m, v
}

// A filtered durable taken over through another node is pumped by that
// node alone; when that node stops, the subscription goes on through a
// survivor with every match, in order for first deliveries, none lost.
func TestClusterFilterTakeoverAndFailover(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	admin := brokertest.Connect(t, c.Node(2))
	if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: "F", Subjects: []string{"f.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	pub := failoverClient(t, c, 2)
	c.Eventually(30*time.Second, "every node to serve F", func() error {
		for _, s := range c.Nodes() {
			cl := brokertest.Connect(t, s)
			_, err := cl.StreamInfo(ctx, "F")
			cl.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	publishEvens(t, pub, 0, 10)

	// A on n1.
	clA := brokertest.Connect(t, c.Node(0))
	subA, err := clA.Subscribe(ctx, "f.x", client.WithFilter("payload.even"), client.WithDurable("fd"), client.WithAckWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer subA.Close()
	for want := 0; want < 10; want += 2 {
		m, v := nextEven(t, subA, 15*time.Second)
		if v.I != want {
			t.Fatalf("A got i=%d, want %d", v.I, want)
		}
		if err := m.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// B takes the durable over through n2: whichever node pumped it for A
	// stops.
	clB := failoverClient(t, c, 1)
	subB, err := clB.Subscribe(ctx, "f.x", client.WithDurable("fd"))
	if err != nil {
		t.Fatal(err)
	}
	defer subB.Close()
	pumpNode := -1
	c.Eventually(10*time.Second, "one node to pump the durable", func() error {
		var counts []int
		pumpNode = -1
		for i := range c.N() {
			n := broker.FilterCount(c.Node(i))
			counts = append(counts, n)
			if n > 0 {
				if pumpNode >= 0 {
					return fmt.Errorf("the nodes run %v filters", counts)
				}
				pumpNode = i
			}
		}
		if pumpNode < 0 || counts[pumpNode] != 1 {
			return fmt.Errorf("the nodes run %v filters", counts)
		}
		return nil
	})
	publishEvens(t, pub, 10, 20)
	for want := 10; want < 20; want += 2 {
		m, v := nextEven(t, subB, 15*time.Second)
		if v.I != want {
			t.Fatalf("B got i=%d, want %d", v.I, want)
		}
		if err := m.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	expectNone(t, subA)

	// The pump's node stops with matches in flight: 20 acked, 22 not, the rest in B's
	// inbox or on the way.
	publishEvens(t, pub, 20, 30)
	m, v := nextEven(t, subB, 15*time.Second)
	if v.I != 20 {
		t.Fatalf("B got i=%d, want 20", v.I)
	}
	if err := m.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if _, v := nextEven(t, subB, 15*time.Second); v.I != 22 {
		t.Fatalf("B got i=%d, want 22", v.I)
	}
	if pumpNode == 2 {
		pub = failoverClient(t, c, 0)
	}
	c.Stop(pumpNode)
	publishEvens(t, pub, 30, 40)

	seen := map[int]int{}
	last := 20 // the last first delivery
	for len(seen) < 9 {
		m, v := nextEven(t, subB, 60*time.Second)
		seen[v.I]++
		if m.NumDelivered == 1 {
			if v.I < last {
				t.Fatalf("i=%d delivered for the first time after i=%d", v.I, last)
			}
			last = v.I
		}
		// The ack of a message in flight when the node went may be lost:
		// it comes again (at least once).
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = m.Ack(actx)
		cancel()
	}
	for i := 22; i < 40; i += 2 {
		if seen[i] == 0 {
			t.Fatalf("i=%d never came (seen %v)", i, seen)
		}
	}
	c.Eventually(10*time.Second, "one survivor to pump the durable", func() error {
		var counts []int
		running := 0
		for _, s := range c.Nodes() {
			counts = append(counts, broker.FilterCount(s))
			running += broker.FilterCount(s)
		}
		if running != 1 {
			return fmt.Errorf("the survivors run %v filters, want B's alone", counts)
		}
		return nil
	})
}
