package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A removal written to the identity store by another node (here: straight
// into the bucket, as a peer's write arrives) closes the user's
// connections on this node too, without this node answering the request.
func TestRevocationFollowsTheStore(t *testing.T) {
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "victim", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}})
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	nc, err := nats.Connect(s.ClientURL(), nats.Token(r.Key), nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	op, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	js, err := jetstream.New(op)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "SQ_USERS")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "victim"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the removed user's connection is still open")
	}
}
