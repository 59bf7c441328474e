package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// A header block nats.go would not decode (no NATS/1.0 line, a line
// without a colon) is refused with an envelope error naming it, and
// nothing is stored; it used to be stored without its headers.
func TestMalformedHeaderBlockRefused(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "HDR", "hdr.>")
	for _, hdr := range []string{
		"HTTP/1.1 200 OK\r\n\r\n",
		"NATS/1.0\r\nno colon here\r\n\r\n",
		"NATS/1.0 1\r\n\r\n",
	} {
		reply := rawPublish(t, s.ClientURL(), "hdr.x", hdr, "data")
		if !strings.Contains(reply, `"error"`) || !strings.Contains(reply, "header block is malformed") {
			t.Fatalf("header block %q: reply %q", hdr, reply)
		}
	}
	info, err := c.StreamInfo(context.Background(), "HDR")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Messages != 0 {
		t.Fatalf("%d messages stored", info.State.Messages)
	}
}

// rawPublish writes one HPUB on a raw socket and returns the payload of
// the reply to it.
func rawPublish(t *testing.T, url, subject, hdr, data string) string {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "CONNECT {\"headers\":true,\"verbose\":false,\"pedantic\":false}\r\nSUB _INBOX.raw 1\r\nPING\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for { // the subscription is in place once PONG comes
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("raw socket: %v", err)
		}
		if line == "PONG\r\n" {
			break
		}
	}
	fmt.Fprintf(conn, "HPUB %s _INBOX.raw %d %d\r\n%s%s\r\n", subject, len(hdr), len(hdr)+len(data), hdr, data)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("raw socket: %v", err)
		}
		if strings.HasPrefix(line, "MSG _INBOX.raw") || strings.HasPrefix(line, "HMSG _INBOX.raw") {
			body, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			return body
		}
		if line == "PING\r\n" {
			fmt.Fprint(conn, "PONG\r\n")
		}
	}
}

// With ingress_transport tcp the ingress's connections reach the server
// over loopback TCP and the ingress behaves as over the in-process pipe:
// a valid publish is acknowledged and stored, a malformed one refused
// and not stored.
func TestIngressOverTCP(t *testing.T) {
	s := brokertest.Start(t, func(c *broker.Config) { c.IngressTransport = broker.IngressTCP })
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "TCP", "tcp.>")
	ctx := context.Background()
	if _, err := c.Publish(ctx, "tcp.ok", []byte(`{"n":1}`)); err != nil {
		t.Fatalf("publish through the TCP ingress: %v", err)
	}
	reply := rawPublish(t, s.ClientURL(), "tcp.bad", "NATS/1.0\r\nno colon here\r\n\r\n", "data")
	if !strings.Contains(reply, "header block is malformed") {
		t.Fatalf("malformed header block: reply %q", reply)
	}
	info, err := c.StreamInfo(ctx, "TCP")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Messages != 1 {
		t.Fatalf("%d messages stored, want 1", info.State.Messages)
	}
	cz, err := s.NATSServer().Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tcp int
	for _, ci := range cz.Conns {
		if strings.HasPrefix(ci.Name, "semaq-ingress") && ci.IP == "127.0.0.1" {
			tcp++
		}
	}
	if tcp == 0 {
		t.Fatalf("no ingress connection over loopback TCP among %d connections", len(cz.Conns))
	}
}

// An unknown transport, or tcp on a client port with TLS, is refused at
// start naming the setting.
func TestIngressTransportRefused(t *testing.T) {
	for _, tc := range []struct {
		cfg  func(*broker.Config)
		want string
	}{
		{func(c *broker.Config) { c.IngressTransport = "udp" }, `ingress_transport: "udp" is not pipe or tcp`},
		{func(c *broker.Config) { c.IngressTransport = "tcp"; c.TLSCert, c.TLSKey = "cert.pem", "key.pem" }, "ingress_transport: tcp needs a client port without TLS"},
	} {
		cfg := broker.DefaultConfig()
		cfg.DataDir = t.TempDir()
		cfg.Listen = "127.0.0.1:0"
		cfg.HTTP = ""
		tc.cfg(&cfg)
		_, err := broker.New(cfg, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("got %v, want an error containing %q", err, tc.want)
		}
	}
}
