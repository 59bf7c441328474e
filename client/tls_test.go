package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// The SDK reaches a broker with mutual TLS through nats.go's own options.
func TestConnectMutualTLS(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq test CA")
	srvCert, srvKey := ca.Server(t).Write(t, t.TempDir())
	s := brokertest.Start(t, func(c *broker.Config) { c.TLSCert, c.TLSKey, c.TLSClientCA = srvCert, srvKey, ca.File })
	cert, key := ca.Client(t, "sdk").Write(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := client.Connect(ctx, s.ClientURL(), client.WithNATSOptions(nats.RootCAs(ca.File), nats.ClientCert(cert, key)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ServerInfo(ctx); err != nil {
		t.Fatalf("ServerInfo over mutual TLS: %v", err)
	}
	if c, err := client.Connect(ctx, s.ClientURL(), client.WithNATSOptions(nats.RootCAs(ca.File))); err == nil {
		c.Close()
		t.Fatal("connected without a client certificate")
	}
}

// A broker serving TLS: trust its CA, and present a client certificate when
// it requires one (docs/security.md, TLS).
func ExampleWithNATSOptions() {
	ctx := context.Background()
	c, err := client.Connect(ctx, "tls://broker.internal:4222", client.WithNATSOptions(
		nats.RootCAs("ca.pem"),
		nats.ClientCert("client.pem", "client-key.pem"),
	))
	if err != nil {
		return
	}
	defer c.Close()
}
