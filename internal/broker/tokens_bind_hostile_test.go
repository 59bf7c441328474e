package broker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/tokens"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// The subjects token streams use between the broker's own connections are
// closed to clients: a forged job binding on _SQ_TOK.bind would make its
// sender the writer of any request's stream (and the notice carries the
// lease), and a relay's $SQ.TWN.<node>.> carries writer keys. The NATS
// server refuses a client each of them.
func TestTokenBrokerSubjectsClosed(t *testing.T) {
	s := brokertest.Start(t)
	errs := make(chan error, 16)
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	refused := func(what, subj string, op func() error) {
		t.Helper()
		if err := op(); err != nil {
			t.Fatalf("%s %s: %v", what, subj, err)
		}
		_ = nc.Flush()
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), subj) {
				t.Fatalf("%s %s: %v, want the server's refusal", what, subj, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s was not refused", what, subj)
		}
	}
	notice := []byte(`{"n":"forger","i":"victim-1","t":"acme","k":"forger-key-0123456789"}`)
	refused("publish", tokens.BindSubject, func() error { return nc.Publish(tokens.BindSubject, notice) })
	refused("subscribe", tokens.BindSubject, func() error { _, err := nc.SubscribeSync(tokens.BindSubject); return err })
	relay := tokens.NodeWritePrefix(s.NATSServer().Name()) + ">"
	refused("subscribe", relay, func() error { _, err := nc.SubscribeSync(relay); return err })
	refused("subscribe", semaq.TokenWritePrefix+">", func() error { _, err := nc.SubscribeSync(semaq.TokenWritePrefix + ">"); return err })
}
