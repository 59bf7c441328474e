package wire

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// startServer runs a NATS server whose only user is an nkey, and returns
// it with that user's key pair.
func startServer(t *testing.T) (*server.Server, nkeys.KeyPair) {
	t.Helper()
	return startServerMax(t, 4096)
}

// startServerMax is startServer with a limit of maxPayload bytes per
// message.
func startServerMax(t testing.TB, maxPayload int32) (*server.Server, nkeys.KeyPair) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		MaxPayload: maxPayload, Nkeys: []*server.NkeyUser{{Nkey: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	return ns, kp
}

func connect(t testing.TB, ns *server.Server, kp nkeys.KeyPair) *Conn {
	t.Helper()
	pub, _ := kp.PublicKey()
	c, err := Connect(Config{Dial: ns.InProcessConn, Name: "wire-test", Nkey: pub, Sign: kp.Sign})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		<-c.Done()
	})
	return c
}

func natsConn(t testing.TB, ns *server.Server, kp nkeys.KeyPair) *nats.Conn {
	t.Helper()
	pub, _ := kp.PublicKey()
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.Nkey(pub, kp.Sign))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestConnectRefusedWithoutTheKey(t *testing.T) {
	ns, _ := startServer(t)
	other, _ := nkeys.CreateUser()
	pub, _ := other.PublicKey()
	_, err := Connect(Config{Dial: ns.InProcessConn, Nkey: pub, Sign: other.Sign})
	if err == nil {
		t.Fatal("a key the server does not know logged in")
	}
}

// Messages published by a stock client arrive in order with their headers
// as nats.go would decode them, and what the wire connection publishes
// reaches a stock subscriber with the same headers.
func TestRoundTripWithHeaders(t *testing.T) {
	ns, kp := startServer(t)
	c := connect(t, ns, kp)
	nc := natsConn(t, ns, kp)

	type got struct {
		subject, reply string
		h              nats.Header
		data           string
	}
	in := make(chan got, 100)
	if _, err := c.QueueSubscribe("in.>", "q", func(m *Msg) {
		var h nats.Header
		if m.Header != nil {
			var err error
			if h, err = DecodeHeader(string(m.Header)); err != nil {
				t.Errorf("decoding %q: %v", m.Header, err)
			}
		}
		in <- got{string(m.Subject), string(m.Reply), h, string(m.Data)}
		// Republish from the reader, as the ingress does.
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
	const n = 50
	for i := range n {
		m := nats.NewMsg("in.x")
		if i%2 == 0 {
			m.Header.Set("AI-Model", " m"+strconv.Itoa(i)+" ")
			m.Header.Add("Multi", "a")
			m.Header.Add("Multi", "b")
		}
		m.Reply = "_INBOX.r." + strconv.Itoa(i)
		m.Data = []byte(strconv.Itoa(i))
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		g := <-in
		if g.data != strconv.Itoa(i) || g.subject != "in.x" || g.reply != "_INBOX.r."+strconv.Itoa(i) {
			t.Fatalf("message %d arrived as %+v", i, g)
		}
		if i%2 == 0 && (g.h.Get("AI-Model") != "m"+strconv.Itoa(i) || len(g.h["Multi"]) != 2) {
			t.Fatalf("message %d has headers %v", i, g.h)
		}
		if i%2 == 1 && g.h != nil {
			t.Fatalf("message %d without headers arrived with %v", i, g.h)
		}
		m, err := out.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != strconv.Itoa(i) || m.Subject != "out.in.x" || m.Reply != g.reply {
			t.Fatalf("republished %d as %s %s %q", i, m.Subject, m.Reply, m.Data)
		}
		if i%2 == 0 && (m.Header.Get("AI-Model") != "m"+strconv.Itoa(i) || m.Header.Values("Multi")[1] != "b") {
			t.Fatalf("republished %d with headers %v", i, m.Header)
		}
	}
}

func TestPublishRefusesTooLargeAndBadSubjects(t *testing.T) {
	ns, kp := startServer(t)
	c := connect(t, ns, kp)
	if err := c.Publish("x", "", nil, make([]byte, 5000)); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("5000 bytes over a 4096 limit: %v", err)
	}
	if err := c.Publish("x", "", nats.Header{"K": {string(make([]byte, 4090))}}, []byte("d")); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("headers past the limit: %v", err)
	}
	for _, s := range []string{"", "a b", "a\r\nPUB x 1", "a\tb"} {
		if err := c.Publish(s, "", nil, nil); !errors.Is(err, nats.ErrBadSubject) {
			t.Fatalf("subject %q: %v", s, err)
		}
		if err := c.Publish("x", s+"r", nil, nil); s != "" && !errors.Is(err, nats.ErrBadSubject) {
			t.Fatalf("reply %q: %v", s, err)
		}
	}
	if err := c.Publish("x", "", nats.Header{"Bad:Key": {"v"}}, nil); !errors.Is(err, nats.ErrBadHeaderMsg) {
		t.Fatalf("bad header key: %v", err)
	}
}

// A connection the server drops logs in again and keeps its
// subscriptions.
func TestReconnectsAndSubscribesAgain(t *testing.T) {
	ns, kp := startServer(t)
	c := connect(t, ns, kp)
	nc := natsConn(t, ns, kp)
	got := make(chan string, 10)
	if _, err := c.QueueSubscribe("r", "", func(m *Msg) { got <- string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	cz, err := ns.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range cz.Conns {
		if ci.Name == "wire-test" {
			if err := ns.DisconnectClientByID(ci.Cid); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := nc.Publish("r", []byte("after")); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-got:
			if d == "after" {
				return
			}
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no message after the server dropped the connection")
		}
	}
}

func TestUnsubscribeStopsDelivery(t *testing.T) {
	ns, kp := startServer(t)
	c := connect(t, ns, kp)
	nc := natsConn(t, ns, kp)
	got := make(chan string, 10)
	s, err := c.QueueSubscribe("u", "", func(m *Msg) { got <- string(m.Data) })
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("u", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("u", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := <-got; d != "1" {
		t.Fatalf("got %q", d)
	}
	select {
	case d := <-got:
		t.Fatalf("delivered %q after Unsubscribe", d)
	default:
	}
}
