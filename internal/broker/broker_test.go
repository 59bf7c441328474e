package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/semaq"
)

func startServer(t *testing.T, mut ...func(*broker.Config)) *broker.Server {
	t.Helper()
	cfg := broker.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = "127.0.0.1:0"
	for _, m := range mut {
		m(&cfg)
	}
	s, err := broker.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

func TestStockJetStreamPublish(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	c, err := client.Connect(ctx, s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.inference.>"}}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	ack, err := js.Publish("ai.inference.llm", []byte("hi"), nats.MsgId("a"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != "AI" || ack.Sequence != 1 {
		t.Fatalf("ack = %+v", ack)
	}
	m := nats.NewMsg("ai.inference.llm")
	m.Header.Set("AI-Priority", "urgent")
	_, err = js.PublishMsg(m)
	if err == nil {
		t.Fatal("bad priority accepted")
	}
	t.Log(err)
	// direct write to storage is denied
	_, err = js.Publish(semaq.StoragePrefix+"ai.inference.llm", []byte("x"), nats.AckWait(500*time.Millisecond))
	t.Log("direct:", err)
	sub, err := c.Subscribe(ctx, "ai.inference.>")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	msg, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %d %v %q", msg.Subject, msg.Seq, msg.Header, msg.Data)
	_, err = c.Publish(ctx, "nowhere.x", nil)
	if !errors.Is(err, semaq.ErrNoStream) {
		t.Fatal(err)
	}
}
