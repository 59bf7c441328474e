package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// With the ingress sharded, what ingress/wire.go promises holds: each
// publisher's acknowledged publishes are stored in publish order, across
// subjects; publishes without a reply keep their order per subject.
func TestShardedIngressKeepsPerPublisherOrder(t *testing.T) {
	s := brokertest.StartWith(t, []broker.Option{broker.WithIngressShards(4)})
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "ORD", "ord.>")
	ctx := context.Background()

	const pubs, n = 4, 500
	subjects := []string{"ord.a", "ord.b", "ord.c"}
	done := make(chan error, pubs+1)
	for p := range pubs {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for i := range n {
				for {
					_, err := js.PublishAsync(subjects[i%len(subjects)], fmt.Appendf(nil, "p%d-%d", p, i))
					if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
						continue // the window stayed full; wait again
					}
					if err != nil {
						done <- err
						return
					}
					break
				}
			}
			select {
			case <-js.PublishAsyncComplete():
				done <- nil
			case <-time.After(30 * time.Second):
				done <- fmt.Errorf("publisher %d: %d publishes unacknowledged", p, js.PublishAsyncPending())
			}
		}()
	}
	// One more publisher without replies, on one subject: order per
	// subject.
	raw, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	go func() {
		for i := range n {
			if err := raw.Publish("ord.raw", fmt.Appendf(nil, "r-%d", i)); err != nil {
				done <- err
				return
			}
		}
		done <- raw.Flush()
	}()
	for range pubs + 1 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	total := pubs*n + n
	// Nothing acknowledges the unreplied publishes: wait until the stream
	// holds them all.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.StreamInfo(ctx, "ORD")
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Messages == uint64(total) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds %d of %d messages", info.State.Messages, total)
		}
		time.Sleep(10 * time.Millisecond)
	}

	sub, err := c.Subscribe(ctx, "ord.>", client.WithMaxMessages(total), client.WithPrefetch(500))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	next := make(map[string]int) // publisher → the index it must store next
	for range total {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		who, idx, ok := strings.Cut(string(m.Data), "-")
		i, err := strconv.Atoi(idx)
		if !ok || err != nil {
			t.Fatalf("stored %q", m.Data)
		}
		if i != next[who] {
			t.Fatalf("publisher %s: message %d stored where %d was due (seq %d, subject %s)", who, i, next[who], m.Seq, m.Subject)
		}
		next[who] = i + 1
	}
	for p := range pubs {
		if got := next["p"+strconv.Itoa(p)]; got != n {
			t.Fatalf("publisher %d: %d of %d stored", p, got, n)
		}
	}
	if next["r"] != n {
		t.Fatalf("publisher without replies: %d of %d stored", next["r"], n)
	}
}
