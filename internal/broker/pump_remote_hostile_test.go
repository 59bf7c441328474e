package broker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// The subjects the nodes of a cluster use for pumps and adaptive weights
// are the broker's own: a client can neither join a key-shared group past
// the JOIN's checks, nor stop another's filtered durable, nor report
// routed counts, nor listen to any of it.
func TestPumpAndWeightSubjectsClosed(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "KS", "ks.>")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	member, err := c.SubscribeKeyShared(ctx, "ks.chat", "g", client.KeyBy("session"), client.WithMember("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	picky, err := c.Subscribe(ctx, "ks.chat", client.WithFilter("true"), client.WithDurable("fd"))
	if err != nil {
		t.Fatal(err)
	}
	defer picky.Close()

	var mu sync.Mutex
	var denied []string
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		denied = append(denied, err.Error())
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	spy, err := nc.SubscribeSync("_SQ_PUMP.>")
	if err != nil {
		t.Fatal(err)
	}
	spyRW, err := nc.SubscribeSync("_SQ_RW.>")
	if err != nil {
		t.Fatal(err)
	}
	// A join into the group with a deliver subject in the broker's
	// namespace, which the JOIN's checks refuse.
	join, _ := json.Marshal(semaq.KeySharedJoinRequest{Subject: "ks.chat", Group: "g", Key: "session", Member: "spy", DeliverSubject: "$SQ.w.ks.x"})
	for _, subj := range []string{"_SQ_PUMP.ks.run.KS.g", "_SQ_PUMP.ks.start." + s.NATSServer().Name(), "_SQ_PUMP.ks.info.KS.g", "_SQ_PUMP.f.take.KS.fd"} {
		if m, err := nc.Request(subj, join, 300*time.Millisecond); err == nil {
			t.Fatalf("%s answered a client: %q", subj, m.Data)
		}
	}
	if err := nc.Publish("_SQ_RW.routed", []byte(`{"node":"x","rules":{"r":{"rev":1,"n":[1000000]}}}`)); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()

	info, err := c.KeySharedInfo(ctx, "KS", "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Members) != 1 || info.Members[0] != "a" {
		t.Fatalf("the group's members are %v, want only a", info.Members)
	}
	if n := broker.FilterCount(s); n != 1 {
		t.Fatalf("%d filters run, want the durable's still", n)
	}
	publish(t, c, "ks.chat", `{"k":"s","i":0}`, client.WithSession("s"))
	if m := nextMsg(t, picky); string(m.Data) != `{"k":"s","i":0}` {
		t.Fatalf("the durable got %q", m.Data)
	}
	if m := nextMsg(t, member); string(m.Data) != `{"k":"s","i":0}` {
		t.Fatalf("the member got %q", m.Data)
	}
	for _, sub := range []*nats.Subscription{spy, spyRW} {
		if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
			t.Fatalf("a client read %s: %q", m.Subject, m.Data)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"_SQ_PUMP.>", "_SQ_RW.>", "_SQ_RW.routed"} {
		found := false
		for _, d := range denied {
			if strings.Contains(d, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("no permissions violation named %s; the client was told %v", want, denied)
		}
	}
}
