package broker_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// The nodes' change requests (_SQ_SYNC) can make a node disconnect a
// tenant's subscribed users (a request's resubscribe list): no client may
// send one, with auth (an admin included) or without.
func TestClusterSyncRequestsClosedToClients(t *testing.T) {
	req := []byte(`{"from":"n9","resubscribe":["acme"]}`)
	try := func(t *testing.T, s *broker.Server, opts ...nats.Option) {
		t.Helper()
		var mu sync.Mutex
		var denied []string
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			denied = append(denied, err.Error())
			mu.Unlock()
		}))
		nc, err := nats.Connect(s.ClientURL(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if err := nc.Publish("_SQ_SYNC.req", req); err != nil {
			t.Fatal(err)
		}
		// The server's -ERR comes before the flush's PONG; the handler
		// runs on its own goroutine: wait for it, bounded.
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			got := strings.Join(denied, "; ")
			mu.Unlock()
			if strings.Contains(got, `Publish to "_SQ_SYNC.req"`) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("publish to _SQ_SYNC.req not refused (errors: %q)", got)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Run("no auth", func(t *testing.T) {
		try(t, brokertest.Start(t))
	})
	t.Run("admin", func(t *testing.T) {
		s := brokertest.Start(t, brokertest.WithAuth)
		try(t, s, nats.Token(brokertest.AdminKey(t, s)))
	})
}
