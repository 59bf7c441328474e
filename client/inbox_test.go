package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// With auth on, a connection left on nats.go's shared reply inbox gets
// no reply at all: the SDK fails its requests at once with what to do,
// not with the request's timeout.
func TestSharedInboxRefusalTranslated(t *testing.T) {
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "pub", Role: semaq.RolePublisher, Subjects: []string{"orders.>"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Connect(context.Background(), s.ClientURL(), client.WithKey(u.Key),
		client.WithTimeout(30*time.Second), client.WithNATSOptions(nats.CustomInboxPrefix("_INBOX")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	_, err = c.ServerInfo(ctx)
	if !errors.Is(err, semaq.ErrForbidden) || !strings.Contains(err.Error(), "_INBOX_<user>") || ctx.Err() != nil {
		t.Fatalf("a request on the shared inbox with auth on: got %v, want a refusal naming _INBOX_<user> before the timeout", err)
	}
}
