package broker_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/semaq"
)

// TestIngressPolicySteps installs two policy steps: one refuses payloads
// holding a marker, the next rewrites what it passes. Policy runs after
// schema-on-write (a payload the schema refuses never reaches it), before
// routing (a route sees the rewritten payload), and what it leaves is
// what is stored.
func TestIngressPolicySteps(t *testing.T) {
	var seen atomic.Int64
	refuse := broker.PolicyStep{Name: "refuse", Run: func(m *nats.Msg, _ *semaq.Envelope) *semaq.APIError {
		seen.Add(1)
		if bytes.Contains(m.Data, []byte("SECRET")) {
			return semaq.NewAPIError(semaq.ErrBadRequest, "policy refuse: payload on %s holds a secret", m.Subject)
		}
		return nil
	}}
	redact := broker.PolicyStep{Name: "redact", Run: func(m *nats.Msg, env *semaq.Envelope) *semaq.APIError {
		m.Data = bytes.ReplaceAll(m.Data, []byte("4111-1111"), []byte("[card]"))
		m.Header.Set("Policy-Tenant", env.Tenant)
		return nil
	}}
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = t.TempDir(), "127.0.0.1:0", ""
	s, err := broker.New(cfg, nil, broker.WithIngressPolicy(refuse, redact))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	c, err := client.Connect(ctx, s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	if _, _, err := c.RegisterSchema(ctx, "ai-req", `{"type":"object","required":["q"]}`); err != nil {
		t.Fatal(err)
	}
	if err := c.BindSchema(ctx, "ai.>", "ai-req"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddRoute(ctx, semaq.Route{Name: "redacted", Subject: "ai.in", When: `payload.q == "[card] please"`, To: "ai.clean"}); err != nil {
		t.Fatal(err)
	}

	// The schema refuses first: the policy never sees the message.
	if _, err := c.Publish(ctx, "ai.in", []byte(`{"no":"q"}`)); !errors.Is(err, semaq.ErrSchema) {
		t.Fatalf("schema-invalid publish: err = %v", err)
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("policy ran %d times for a message the schema refused", n)
	}
	// The first policy step refuses, naming itself.
	_, err = c.Publish(ctx, "ai.in", []byte(`{"q":"SECRET"}`))
	if !errors.Is(err, semaq.ErrBadRequest) || !bytes.Contains([]byte(err.Error()), []byte("policy refuse")) {
		t.Fatalf("refused publish: err = %v", err)
	}
	// The second rewrites; the route matches on the rewritten payload and
	// the rewritten message is what is stored.
	ack, err := c.Publish(ctx, "ai.in", []byte(`{"q":"4111-1111 please"}`), client.WithTenant("acme"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, ack.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != `{"q":"[card] please"}` || m.Subject != "ai.clean" || m.Header.Get("Policy-Tenant") != "acme" {
		t.Fatalf("stored %s on %s with Policy-Tenant %q", m.Data, m.Subject, m.Header.Get("Policy-Tenant"))
	}
	if n := seen.Load(); n != 2 {
		t.Fatalf("policy ran %d times, want 2", n)
	}
}

func TestWithOperatorRefusesAKeyThatIsNotAUserKey(t *testing.T) {
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = t.TempDir(), "127.0.0.1:0", ""
	for _, pub := range []string{"", "alice", "SUAM3BLZDGXEL5JXL5XEOBTD7FBL2EHXV2IBIX2C4HVU6UQ7U5ABPMNGCE"} {
		if _, err := broker.New(cfg, nil, broker.WithOperator(pub)); err == nil || !strings.Contains(err.Error(), "operator") {
			t.Errorf("WithOperator(%q): err = %v", pub, err)
		}
	}
}
