package broker_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

func TestMessagesAndStreamsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	withDir := func(c *broker.Config) { c.DataDir = dir }
	ctx := context.Background()

	s1 := brokertest.Start(t, withDir)
	c1 := brokertest.Connect(t, s1)
	brokertest.AddStream(t, c1, "AI", "ai.>")
	for i := range 5 {
		if _, err := c1.Publish(ctx, "ai.req", []byte(strconv.Itoa(i)), client.WithTenant("acme")); err != nil {
			t.Fatal(err)
		}
	}
	c1.Close()
	if err := s1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	s2 := brokertest.Start(t, withDir)
	c2 := brokertest.Connect(t, s2)
	if n := messages(t, c2, "AI"); n != 5 {
		t.Fatalf("after restart the stream has %d messages, want 5", n)
	}
	// The ingress serves the restored stream without anyone re-adding it.
	ack, err := c2.Publish(ctx, "ai.req", []byte("5"))
	if err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	if ack.Sequence != 6 {
		t.Fatalf("seq after restart = %d, want 6", ack.Sequence)
	}
	sub, err := c2.Subscribe(ctx, "ai.req", client.WithMaxMessages(6))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range 6 {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != strconv.Itoa(i) {
			t.Fatalf("message %d = %q", i, m.Data)
		}
	}
}

func TestPerPublisherOrder(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "ORD", "ord.>")
	ctx := context.Background()
	// A stock JetStream client publishing asynchronously: the stored order
	// is the publish order.
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := range n {
		if _, err := js.PublishAsync("ord.x", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("async publishes not acknowledged")
	}
	sub, err := c.Subscribe(ctx, "ord.x", client.WithMaxMessages(n), client.WithPrefetch(500))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range n {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != strconv.Itoa(i) || m.Seq != uint64(i+1) {
			t.Fatalf("position %d holds %q (seq %d)", i, m.Data, m.Seq)
		}
	}
}

func TestPerMessageTTL(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "TTL", "ttl.>")
	ctx := context.Background()
	if _, err := c.Publish(ctx, "ttl.short", []byte("gone soon"), client.WithTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "ttl.long", []byte("stays")); err != nil {
		t.Fatal(err)
	}
	// Wait for the condition, bounded: JetStream expires the message.
	deadline := time.Now().Add(15 * time.Second)
	for messages(t, c, "TTL") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("message with Nats-TTL 1s still stored after 15s (%d messages)", messages(t, c, "TTL"))
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, not synchronising
	}
	sub, err := c.Subscribe(ctx, "ttl.>", client.WithMaxMessages(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m, err := sub.Next(ctx)
	if err != nil || string(m.Data) != "stays" {
		t.Fatalf("remaining message %v %v", m, err)
	}
}

func TestAckRedeliveryAndDurableResume(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "WQ", "wq.>")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 4 {
		if _, err := c.Publish(ctx, "wq.job", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.Subscribe(ctx, "wq.job", client.WithDurable("workers"), client.WithPrefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	m0, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m0.Nak(0); err != nil {
		t.Fatal(err)
	}
	// Every message is settled once; the nak'd one comes back as a second
	// delivery (JetStream does not promise it comes back first).
	acked := map[string]uint64{}
	for len(acked) < 4 {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d acks: %v", len(acked), err)
		}
		if _, dup := acked[string(m.Data)]; dup {
			t.Fatalf("acked message %q delivered again", m.Data)
		}
		acked[string(m.Data)] = m.NumDelivered
		if err := m.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if acked[string(m0.Data)] != 2 {
		t.Fatalf("nak'd message %q delivered %d times, want 2", m0.Data, acked[string(m0.Data)])
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"4", "5"} {
		if _, err := c.Publish(ctx, "wq.job", []byte(d)); err != nil {
			t.Fatal(err)
		}
	}

	// A new subscription on the durable resumes after what was acked.
	sub2, err := c.Subscribe(ctx, "wq.job", client.WithDurable("workers"), client.WithMaxMessages(2))
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	for _, want := range []string{"4", "5"} {
		m, err := sub2.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != want {
			t.Fatalf("resumed durable got %q, want %q", m.Data, want)
		}
		if err := m.Term("done"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sub2.Next(ctx); err != client.ErrSubscriptionDone {
		t.Fatalf("after max messages: %v", err)
	}
	// The durable is bound to its subject.
	if _, err := c.Subscribe(ctx, "wq.other", client.WithDurable("workers")); err == nil {
		t.Fatal("durable reused for another subject")
	}
}
