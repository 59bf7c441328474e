package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A message published through the ingress of any node is stored once in a
// replicated stream and read through any other node.
func TestClusterIngressEveryNode(t *testing.T) {
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c1 := brokertest.Connect(t, c.Node(0))
	if _, err := c1.AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	for i, s := range c.Nodes() {
		cl := brokertest.Connect(t, s)
		// A node learns of a stream made through another from JetStream's
		// advisory; publish until its ingress serves it.
		c.Eventually(30*time.Second, "node to serve AI", func() error {
			_, err := cl.Publish(ctx, fmt.Sprintf("ai.n%d", i+1), []byte(fmt.Sprintf(`{"from":%d}`, i+1)))
			return err
		})
	}
	for i, s := range c.Nodes() {
		nc, err := brokertest.DialOperator(s)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		st, err := js.Stream(ctx, "AI")
		if err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			m, err := st.GetLastMsgForSubject(ctx, fmt.Sprintf("ai.n%d", j+1))
			if err != nil {
				t.Fatalf("node %d reads ai.n%d: %v", i+1, j+1, err)
			}
			if want := fmt.Sprintf(`{"from":%d}`, j+1); string(m.Data) != want {
				t.Fatalf("node %d reads %q, want %q", i+1, m.Data, want)
			}
		}
		if n := st.CachedInfo().State.Msgs; n != 3 {
			t.Fatalf("node %d sees %d messages, want 3", i+1, n)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("replicas %d, want 3", r)
		}
	}
}
