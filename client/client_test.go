package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

func TestOptionsRejectBadValues(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := context.Background()
	for name, opt := range map[string]client.PublishOption{
		"priority 10":      client.WithPriority(10),
		"empty model":      client.WithModel(""),
		"zero timeout":     client.WithInferenceTimeout(0),
		"short ttl":        client.WithTTL(500 * time.Millisecond),
		"negative tokens":  client.WithPromptTokens(-1),
		"zero deadline":    client.WithDeadline(time.Time{}),
		"empty header key": client.WithHeader("", "v"),
	} {
		if _, err := c.Publish(ctx, "ai.x", nil, opt); !errors.Is(err, semaq.ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
	for name, opt := range map[string]client.SubscribeOption{
		"durable with dot": client.WithDurable("a.b"),
		"prefetch 0":       client.WithPrefetch(0),
		"max 0":            client.WithMaxMessages(0),
		"start seq 0":      client.WithStartSequence(0),
		"ack wait 10ms":    client.WithAckWait(10 * time.Millisecond),
	} {
		if _, err := c.Subscribe(ctx, "ai.x", opt); !errors.Is(err, semaq.ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", name, err)
		}
	}
	if n := func() uint64 { i, _ := c.StreamInfo(ctx, "AI"); return i.State.Messages }(); n != 0 {
		t.Errorf("%d messages stored by refused publishes", n)
	}
}

func TestErrorsMatchSentinels(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := context.Background()
	_, err := c.Publish(ctx, "ai.x", nil, client.WithHeader("AI-Priority", "urgent"))
	if !errors.Is(err, semaq.ErrEnvelope) || errors.Is(err, semaq.ErrNoStream) {
		t.Errorf("bad envelope: %v", err)
	}
	if !strings.Contains(err.Error(), "AI-Priority") {
		t.Errorf("error %q does not name the header", err)
	}
	if _, err := c.Subscribe(ctx, "elsewhere.>"); !errors.Is(err, semaq.ErrNoStream) {
		t.Errorf("subscribe to uncaptured subject: %v", err)
	}
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"b.>"}}); !errors.Is(err, semaq.ErrStreamExists) {
		t.Errorf("duplicate stream: %v", err)
	}
}

func TestConnectFailsClearly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = client.Connect(ctx, "nats://"+addr)
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("connect to a closed port: %v", err)
	}
	if _, err := client.Connect(ctx, "", client.WithTimeout(0)); err == nil {
		t.Fatal("WithTimeout(0) accepted")
	}
}

func TestMsgJSON(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := context.Background()
	if _, err := c.Publish(ctx, "ai.text", []byte("<b>&</b>"), client.WithModel("m")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "ai.bin", []byte{0xff, 0xfe}); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "ai.>", client.WithMaxMessages(2))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var got []string
	for range 2 {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	if !strings.Contains(got[0], `"data":"<b>&</b>"`) || !strings.Contains(got[0], `"AI-Model":"m"`) || strings.Contains(got[0], "data_b64") {
		t.Errorf("text message JSON: %s", got[0])
	}
	if !strings.Contains(got[1], `"data_b64":"//4="`) || strings.Contains(got[1], `"data":`) {
		t.Errorf("binary message JSON: %s", got[1])
	}
}
