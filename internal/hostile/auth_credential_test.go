package hostile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/semaq"
)

// Nkeys of store users (docs/security.md, How the NATS door
// authenticates), attacked as a client would: what a CONNECT can carry in
// its nkey and signature fields, and a valid key smuggled beside a bad
// nkey. Oversized fields stay under the NATS server's 4 KiB control line,
// so that the authenticator, not the protocol parser, refuses them.
func TestAuthNkeyHostile(t *testing.T) {
	s, admin := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	if _, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "nk", Role: semaq.RoleReader, Subjects: []string{"ai.>"}, Nkey: pub}); err != nil {
		t.Fatal(err)
	}
	key := addUser(t, admin, semaq.UserAddRequest{Name: "pub1", Role: semaq.RolePublisher, Subjects: []string{"ai.>"}})
	sign := func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }
	acct, _ := nkeys.CreateAccount()
	apub, _ := acct.PublicKey()
	seed, _ := kp.Seed()
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"oversized nkey", []nats.Option{nats.Nkey(strings.Repeat("U", 2000), sign)}},
		{"the seed as nkey", []nats.Option{nats.Nkey(string(seed), sign)}},
		{"an account key signing", []nats.Option{nats.Nkey(apub, func(n []byte) ([]byte, error) { return acct.Sign(n) })}},
		{"empty signature", []nats.Option{nats.Nkey(pub, func([]byte) ([]byte, error) { return nil, nil })}},
		{"oversized signature", []nats.Option{nats.Nkey(pub, func([]byte) ([]byte, error) { return make([]byte, 2000), nil })}},
		{"signature of another nonce", []nats.Option{nats.Nkey(pub, func([]byte) ([]byte, error) { return kp.Sign([]byte("nonce")) })}},
		// The first credential decides: a valid key does not rescue a bad nkey.
		{"bad nkey beside a valid key", []nats.Option{nats.Nkey(pub, func([]byte) ([]byte, error) { return []byte("x"), nil }), nats.Token(key)}},
		{"nkey user under another name", []nats.Option{nats.Nkey(pub, sign), nats.UserInfo("pub1", "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(s.ClientURL(), append([]nats.Option{nats.MaxReconnects(0)}, tc.opts...)...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
				t.Fatalf("refused for another reason: %v", err)
			}
		})
	}
	// The real signature still opens it, with the reader's rights only.
	nc, err := nats.Connect(s.ClientURL(), nats.Nkey(pub, sign), nats.CustomInboxPrefix(semaq.UserInboxPrefix+"nk"), nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("the user's own signature: %v", err)
	}
	defer nc.Close()
	p := &probe{nc: nc, errs: make(chan error, 64)}
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case p.errs <- err:
		default:
		}
	})
	if !p.pub(t, "ai.x") {
		t.Fatal("a reader by nkey publishes")
	}
	if p.sub(t, "ai.>") {
		t.Fatal("a reader by nkey cannot subscribe to its subjects")
	}
}
