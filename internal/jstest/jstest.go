// Package jstest starts bare NATS servers with JetStream for the tests of
// packages that run below the broker (a subsystem through its Deps, the
// API helpers): on 127.0.0.1 with a free port, storage in a temporary
// directory, shut down at the end of the test. Tests of a whole node use
// internal/brokertest instead.
package jstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server starts a NATS server with JetStream for the test.
func Server(t testing.TB) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("jstest: nats server not ready")
	}
	return ns
}

// Connect opens a connection to ns, closed at the end of the test, and its
// JetStream handle.
func Connect(t testing.TB, ns *server.Server, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Start is Server then Connect.
func Start(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return Connect(t, Server(t))
}
