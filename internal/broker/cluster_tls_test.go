package broker_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// With TLS and a client CA, routes are mutual TLS: the nodes form the
// cluster with certificates of the CA, and a peer presenting a certificate
// of another CA is refused at the handshake.
func TestClusterRoutesMutualTLS(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq cluster CA")
	certFile, keyFile := ca.Node(t, "node").Write(t, t.TempDir())
	c := brokertest.StartCluster(t, 3, func(cfg *broker.Config) {
		cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = certFile, keyFile, ca.File
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Replicated over the routes: the three nodes reached each other.
	nc, err := brokertest.DialOperator(c.Node(0), nats.RootCAs(ca.File), nats.ClientCert(certFile, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3}); err != nil {
		t.Fatalf("R3 stream over TLS routes: %v", err)
	}

	// SIGHUP's reload takes the routes' certificate too, and the cluster
	// keeps working.
	dir := filepath.Dir(certFile)
	ca.Node(t, "node-renewed").Write(t, dir)
	if err := c.Node(0).ReloadTLS(); err != nil {
		t.Fatalf("reload on a clustered node: %v", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3B", Subjects: []string{"r3b.>"}, Replicas: 3}); err != nil {
		t.Fatalf("R3 stream after the reload: %v", err)
	}

	rogue := brokertest.NewCA(t, "another CA").Node(t, "rogue")
	cert, err := tls.X509KeyPair(rogue.CertPEM, rogue.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", c.Node(0).ClusterAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// A route port starts with the TLS handshake.
	tc := tls.Client(conn, &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	err = tc.Handshake()
	if err == nil {
		// TLS 1.3 reports the refused client certificate on the next read.
		_, err = tc.Read(make([]byte, 1))
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a route with another CA's certificate: %v, want refused for its certificate", err)
	}
}
