package wire

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// payload is n bytes that say which message they belong to.
func payload(id, n int) []byte {
	b := bytes.Repeat([]byte(strconv.Itoa(id)+"."), n/2+8)
	return b[:n]
}

// Large messages, below and above the write buffer's bound, republished
// from the reader as the ingress does, arrive whole and in order.
func TestLargeMessagesRepublishedWholeInOrder(t *testing.T) {
	ns, kp := startServerMax(t, 4<<20)
	c := connect(t, ns, kp)
	nc := natsConn(t, ns, kp)
	sizes := []int{64 << 10, 200 << 10, 3 << 19, 256 << 10, 10, 1 << 20, 256<<10 + 1, 5}
	if _, err := c.QueueSubscribe("in.>", "q", func(m *Msg) {
		h, _ := DecodeHeader(string(m.Header))
		if err := c.Publish("out."+string(m.Subject), string(m.Reply), h, m.Data); err != nil {
			t.Errorf("publish: %v", err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := subscribeOut(t, nc)
	const n = 40
	for i := range n {
		m := nats.NewMsg("in.x")
		m.Header.Set("Id", strconv.Itoa(i))
		m.Data = payload(i, sizes[i%len(sizes)])
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		m, err := out.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if m.Header.Get("Id") != strconv.Itoa(i) || !bytes.Equal(m.Data, payload(i, sizes[i%len(sizes)])) {
			t.Fatalf("message %d arrived as Id %q with %d bytes", i, m.Header.Get("Id"), len(m.Data))
		}
	}
}

// Publishers that share a connection and wait for the flusher with large
// messages each send their own headers with their own data.
func TestConcurrentLargePublishesKeepTheirHeaders(t *testing.T) {
	ns, kp := startServerMax(t, 4<<20)
	c := connect(t, ns, kp)
	nc := natsConn(t, ns, kp)
	out := subscribeOut(t, nc)
	const publishers, each = 4, 30
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for i := range each {
				id := p*each + i
				h := nats.Header{"Id": {strconv.Itoa(id)}, "Pad": {string(bytes.Repeat([]byte{'a' + byte(p)}, 100*p))}}
				if err := c.Publish("out."+strconv.Itoa(p), "", h, payload(id, 300<<10)); err != nil {
					t.Errorf("publish: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range publishers * each {
		m, err := out.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		id, err := strconv.Atoi(m.Header.Get("Id"))
		p := id / each
		if err != nil || m.Subject != "out."+strconv.Itoa(p) || len(m.Header.Get("Pad")) != 100*p || !bytes.Equal(m.Data, payload(id, 300<<10)) {
			t.Fatalf("message on %s with headers %v and %d bytes of data", m.Subject, m.Header, len(m.Data))
		}
	}
}

// BenchmarkRepublishLarge republishes 64–256 KiB messages from the reader,
// as the ingress does on the finetune scenario; allocations per message
// show what the write buffer costs.
func BenchmarkRepublishLarge(b *testing.B) {
	ns, kp := startServerMax(b, 1<<20)
	c := connect(b, ns, kp)
	nc := natsConn(b, ns, kp)
	h := nats.Header{"AI-Model": {"m"}, "AI-Tenant": {"t"}}
	var got sync.WaitGroup
	if _, err := c.QueueSubscribe("in.>", "q", func(m *Msg) {
		_ = c.Publish("out.x", "", h, m.Data)
	}); err != nil {
		b.Fatal(err)
	}
	if _, err := nc.Subscribe("out.x", func(*nats.Msg) { got.Done() }); err != nil {
		b.Fatal(err)
	}
	if err := c.Ping(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	sizes := []int{64 << 10, 256 << 10, 128 << 10, 192 << 10}
	data := make([]byte, 256<<10)
	b.ReportAllocs()
	b.SetBytes(160 << 10)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		got.Add(1)
		if err := nc.Publish("in.x", data[:sizes[i%len(sizes)]]); err != nil {
			b.Fatal(err)
		}
	}
	got.Wait()
}

// subscribeOut subscribes nc to what the tests republish (out.>), without
// pending limits, and returns once the server has the subscription.
func subscribeOut(t *testing.T, nc *nats.Conn) *nats.Subscription {
	t.Helper()
	out, err := nc.SubscribeSync("out.>")
	if err != nil {
		t.Fatal(err)
	}
	_ = out.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return out
}
