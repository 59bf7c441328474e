package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// frontDoor is one way into the broker. Every front door must accept and
// refuse exactly the same messages.
type frontDoor struct {
	name string
	// publish returns the ack, or the error text a user would see.
	publish func(t *testing.T, subject string, h map[string]string, data []byte) (*semaq.PubAck, string)
	// features
	rejectsNamingHeader bool
}

func sdkDoor(c *client.Client) frontDoor {
	return frontDoor{name: "sdk", rejectsNamingHeader: true,
		publish: func(t *testing.T, subject string, h map[string]string, data []byte) (*semaq.PubAck, string) {
			m := nats.NewMsg(subject)
			for k, v := range h {
				m.Header.Set(k, v)
			}
			m.Data = data
			ack, err := c.PublishMsg(context.Background(), m)
			if err != nil {
				return nil, err.Error()
			}
			return ack, ""
		}}
}

// natsDoor is a stock nats.go JetStream client, unaware of SemaQ.
func natsDoor(t *testing.T, url string) frontDoor {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return frontDoor{name: "nats.go", rejectsNamingHeader: true,
		publish: func(t *testing.T, subject string, h map[string]string, data []byte) (*semaq.PubAck, string) {
			m := nats.NewMsg(subject)
			for k, v := range h {
				m.Header.Set(k, v)
			}
			m.Data = data
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ack, err := js.PublishMsg(ctx, m)
			if err != nil {
				return nil, err.Error()
			}
			return &semaq.PubAck{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, ""
		}}
}

func httpDoor(addr string) frontDoor {
	return frontDoor{name: "http", rejectsNamingHeader: true,
		publish: func(t *testing.T, subject string, h map[string]string, data []byte) (*semaq.PubAck, string) {
			req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/publish/"+subject, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				var e struct {
					Error struct {
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
					t.Fatalf("http %d with body %q: not the documented error shape", resp.StatusCode, body)
				}
				return nil, fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Message)
			}
			var ack semaq.PubAck
			if err := json.Unmarshal(body, &ack); err != nil {
				t.Fatalf("ack %q: %v", body, err)
			}
			return &ack, ""
		}}
}

func frontDoors(t *testing.T, s *broker.Server, c *client.Client) []frontDoor {
	return []frontDoor{sdkDoor(c), natsDoor(t, s.ClientURL()), httpDoor(s.HTTPAddr())}
}

func TestFrontDoorConformance(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := context.Background()

	for _, door := range frontDoors(t, s, c) {
		t.Run(door.name, func(t *testing.T) {
			subject := "ai.inference." + strings.ReplaceAll(door.name, ".", "-")
			sub, err := c.Subscribe(ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()

			// A well-formed message is stored, normalised and stamped.
			ack, errText := door.publish(t, subject, map[string]string{
				"AI-Model": "llama3-70b", "X-Model-Version": "v2.0.3", "X-Lora-Adapter-ID": "customer-a",
				"AI-Priority": "high", "AI-Tenant": "acme", "X-AI-Intent": "reasoning", "X-AI-Timeout": "8s",
				"AI-Session": "s1", "AI-Prompt-Tokens": "512", "X-Trace-ID": "4bf92f3577b34da6a3ce929d0e0e4736",
			}, []byte(`{"prompt":"hi"}`))
			if errText != "" {
				t.Fatalf("good message refused: %s", errText)
			}
			if ack.Stream != "AI" || ack.Sequence == 0 || ack.Duplicate {
				t.Fatalf("ack = %+v", ack)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			msg, err := sub.Next(wctx)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Subject != subject || msg.Seq != ack.Sequence || string(msg.Data) != `{"prompt":"hi"}` {
				t.Fatalf("stored %s #%d %q", msg.Subject, msg.Seq, msg.Data)
			}
			for k, want := range map[string]string{
				"AI-Model": "llama3-70b", "AI-Model-Version": "v2.0.3", "AI-Adapter": "customer-a",
				"AI-Priority": "2", "AI-Tenant": "acme", "AI-Intent": "reasoning", "AI-Timeout": "8s",
				"AI-Session": "s1", "AI-Prompt-Tokens": "512",
			} {
				if got := msg.Header.Get(k); got != want {
					t.Errorf("stored %s = %q, want %q", k, got, want)
				}
			}
			if !strings.HasPrefix(msg.Header.Get("traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-") {
				t.Errorf("traceparent = %q", msg.Header.Get("traceparent"))
			}
			env, err := msg.Envelope()
			if err != nil {
				t.Fatalf("stored envelope does not parse: %v", err)
			}
			recv, err := time.Parse(time.RFC3339Nano, msg.Header.Get("AI-Received"))
			if err != nil || env.Deadline.Sub(recv) != 8*time.Second {
				t.Errorf("deadline %s is not received %s + 8s (%v)", env.Deadline, recv, err)
			}
			if err := msg.Ack(ctx); err != nil {
				t.Fatal(err)
			}

			// Dedup through Nats-Msg-Id.
			a1, e1 := door.publish(t, subject, map[string]string{"Nats-Msg-Id": "dup-" + door.name}, []byte("1"))
			a2, e2 := door.publish(t, subject, map[string]string{"Nats-Msg-Id": "dup-" + door.name}, []byte("1"))
			if e1 != "" || e2 != "" || a1.Duplicate || !a2.Duplicate || a1.Sequence != a2.Sequence {
				t.Fatalf("dedup: %+v %q / %+v %q", a1, e1, a2, e2)
			}

			before := messages(t, c, "AI")
			for _, bad := range []struct{ header, value, says string }{
				{"AI-Priority", "urgent", "unknown priority"},
				{"X-AI-Timeout", "soon", "not a duration"},
				{"AI-Model", strings.Repeat("m", 300), "limit is 256"},
				{"AI-Prompt-Tokens", "lots", "non-negative integer"},
				{"traceparent", "00-zz-yy-01", "version-traceid"},
				{"Nats-TTL", "forever", "or never"},
			} {
				_, errText := door.publish(t, subject, map[string]string{bad.header: bad.value}, []byte("x"))
				if errText == "" {
					t.Errorf("%s: %s=%q accepted", door.name, bad.header, bad.value)
					continue
				}
				if door.rejectsNamingHeader && (!strings.Contains(strings.ToLower(errText), strings.ToLower(bad.header)) || !strings.Contains(errText, bad.says)) {
					t.Errorf("%s: error %q does not name %s and say %q", door.name, errText, bad.header, bad.says)
				}
			}
			if after := messages(t, c, "AI"); after != before {
				t.Errorf("%d rejected messages were stored", after-before)
			}

			// A subject no stream captures is an error, not a hang.
			start := time.Now()
			if _, errText := door.publish(t, "nowhere.at.all", nil, []byte("x")); errText == "" {
				t.Error("publish to an uncaptured subject succeeded")
			} else if time.Since(start) > 4*time.Second {
				t.Errorf("uncaptured subject took %s to fail", time.Since(start))
			}
		})
	}
}

func messages(t *testing.T, c *client.Client, stream string) uint64 {
	t.Helper()
	info, err := c.StreamInfo(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Messages
}

func TestStorageNamespaceIsReserved(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: waits out request timeouts to show nothing answers; runs without -short")
	}
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()

	// Writing into storage directly is refused by the server.
	if _, err := nc.Request(reserved.StoragePrefix+"ai.x", []byte("sneak"), time.Second); err == nil {
		t.Error("a public client wrote into the storage namespace")
	}
	// So is managing streams behind the semantic layer's back.
	for _, subj := range []string{"$JS.API.STREAM.CREATE.RAW", "$JS.API.STREAM.DELETE.AI", "$JS.API.STREAM.PURGE.AI"} {
		if _, err := nc.Request(subj, []byte(`{"name":"RAW","subjects":["raw.>"]}`), time.Second); err == nil {
			t.Errorf("%s answered a public client", subj)
		}
	}
	if n := messages(t, c, "AI"); n != 0 {
		t.Errorf("stream has %d messages, want 0", n)
	}
	if _, err := c.StreamInfo(ctx, "AI"); err != nil {
		t.Errorf("stream AI gone: %v", err)
	}
	// Reading stays open to any NATS client.
	js, _ := jetstream.New(nc)
	if _, err := c.Publish(ctx, "ai.x", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "AI")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, "ai.x")
	if err != nil || string(m.Data) != "ok" {
		t.Fatalf("stock client read: %v %v", m, err)
	}
}

func TestStreamManagementErrors(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  semaq.StreamConfig
		want error
		says string
	}{
		{semaq.StreamConfig{Name: "bad.name", Subjects: []string{"x.>"}}, semaq.ErrBadStream, "stream name"},
		{semaq.StreamConfig{Name: "NOSUBJ"}, semaq.ErrBadStream, "at least one subject"},
		{semaq.StreamConfig{Name: "ALL", Subjects: []string{">"}}, semaq.ErrBadStream, "reply inboxes"},
		{semaq.StreamConfig{Name: "STAR", Subjects: []string{"*.x"}}, semaq.ErrBadStream, "wildcard"},
		{semaq.StreamConfig{Name: "SYS", Subjects: []string{"$SYS.>"}}, semaq.ErrBadStream, "reserved"},
		{semaq.StreamConfig{Name: "INBOX", Subjects: []string{"_INBOX.>"}}, semaq.ErrBadStream, "inbox"},
		{semaq.StreamConfig{Name: "MIDGT", Subjects: []string{"a.>.b"}}, semaq.ErrBadStream, "'>'"},
		{semaq.StreamConfig{Name: "SELF", Subjects: []string{"a.*", "a.b"}}, semaq.ErrBadStream, "overlap"},
		{semaq.StreamConfig{Name: "OTHER", Subjects: []string{"ai.inference"}}, semaq.ErrBadStream, "overlap"},
		{semaq.StreamConfig{Name: "RET", Subjects: []string{"r.>"}, Retention: "forever"}, semaq.ErrBadStream, "retention"},
		{semaq.StreamConfig{Name: "STO", Subjects: []string{"s.>"}, Storage: "tape"}, semaq.ErrBadStream, "storage"},
		{semaq.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3}, semaq.ErrBadStream, "replicas"},
		{semaq.StreamConfig{Name: "AI", Subjects: []string{"other.>"}}, semaq.ErrStreamExists, "already exists"},
	} {
		_, err := c.AddStream(ctx, tc.cfg)
		if !errors.Is(err, tc.want) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.says)) {
			t.Errorf("AddStream(%+v) = %v; want %v saying %q", tc.cfg, err, tc.want, tc.says)
		}
	}
	if _, err := c.StreamInfo(ctx, "NOPE"); !errors.Is(err, semaq.ErrStreamNotFound) {
		t.Errorf("info of a missing stream: %v", err)
	}
	if err := c.DeleteStream(ctx, "NOPE"); !errors.Is(err, semaq.ErrStreamNotFound) {
		t.Errorf("delete of a missing stream: %v", err)
	}
	list, err := c.Streams(ctx)
	if err != nil || len(list) != 1 || list[0].Config.Name != "AI" {
		t.Fatalf("streams after refused adds: %+v %v", list, err)
	}
	if err := c.DeleteStream(ctx, "AI"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "ai.x", nil); !errors.Is(err, semaq.ErrNoStream) {
		t.Errorf("publish after delete: %v", err)
	}
}

func TestStreamInfoReportsConfig(t *testing.T) {
	s := brokertest.Start(t, func(c *broker.Config) { c.Sync = broker.SyncAlways })
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	info, err := c.AddStream(ctx, semaq.StreamConfig{
		Name: "WORK", Subjects: []string{"work.a", "work.b.>"}, Retention: "workqueue",
		Storage: "file", MaxAge: time.Hour, MaxBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	if cfg.Retention != "workqueue" || cfg.Storage != "file" || cfg.MaxAge != time.Hour || cfg.MaxBytes != 1<<20 ||
		cfg.Replicas != 1 || strings.Join(cfg.Subjects, ",") != "work.a,work.b.>" || info.Sync != "always" {
		t.Fatalf("info = %+v", info)
	}
	mem, err := c.AddStream(ctx, semaq.StreamConfig{Name: "MEM", Subjects: []string{"mem.>"}, Storage: "memory", Retention: "interest"})
	if err != nil {
		t.Fatal(err)
	}
	if mem.Config.Storage != "memory" || mem.Config.Retention != "interest" || mem.Sync != "memory" {
		t.Fatalf("memory stream info = %+v", mem)
	}
}

// TestStreamCreateRacesAdvisoryResync creates streams while JetStream's
// advisories make the node resync its stream list: a publish right after
// each create must find the ingress serving the new stream.
func TestStreamCreateRacesAdvisoryResync(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	for i := range 30 {
		name := fmt.Sprintf("S%d", i)
		subj := fmt.Sprintf("race%d.x", i)
		// 1 MiB each: JetStream reserves a stream's MaxBytes from the
		// store's share of the free disk, which 30 streams of the default
		// 1 GiB would exhaust on a small disk.
		sc := semaq.StreamConfig{Name: name, Subjects: []string{fmt.Sprintf("race%d.>", i)}, MaxBytes: 1 << 20}
		if _, err := c.AddStream(ctx, sc); err != nil {
			t.Fatal(err)
		}
		for j := range 20 {
			if _, err := c.Publish(ctx, subj, []byte("x")); err != nil {
				t.Fatalf("stream %s, publish %d right after create: %v", name, j, err)
			}
		}
	}
}
