package broker_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/node"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Store users without a key (docs/security.md, How the NATS door
// authenticates): by nkey here, by TLS client certificate in
// credential_cert_test.go.

// newNkey makes a user nkey and writes its seed to a file.
func newNkey(t *testing.T) (pub, seedFile string, kp nkeys.KeyPair) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	seedFile = filepath.Join(t.TempDir(), "user.nk")
	brokertest.WriteFile(t, seedFile, seed)
	return pub, seedFile, kp
}

// signer signs the server's nonce with kp.
func signer(kp nkeys.KeyPair) nats.SignatureHandler {
	return func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }
}

// permErrs collects the permission errors the server sends a connection.
func permErrs() (nats.Option, chan error) {
	ch := make(chan error, 16)
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case ch <- err:
		default:
		}
	}), ch
}

func authRefused(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: connected, want refused", what)
	}
	// A refusal after repeated failures from one address is slowed down
	// (docs/security.md, Repeated failures); on a loaded machine the
	// server's authentication timeout may close the connection first,
	// which refuses it all the same.
	if errors.Is(err, io.EOF) || strings.Contains(strings.ToLower(err.Error()), "authentication timeout") {
		return
	}
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("%s: refused for another reason: %v", what, err)
	}
}

func TestNkeyUser(t *testing.T) {
	e := newTenantEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, seedFile, kp := newNkey(t)
	resp, err := e.admin.AddUser(ctx, semaq.UserAddRequest{Name: "nk-pub", Tenant: "acme", Role: semaq.RolePublisher,
		Subjects: []string{"orders.>"}, Nkey: pub})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Key != "" || len(resp.User.Keys) != 0 || resp.User.Nkey != pub {
		t.Fatalf("add: %+v, want the nkey and no key", resp)
	}
	if info, err := e.admin.UserInfo(ctx, "nk-pub"); err != nil || info.Nkey != pub {
		t.Fatalf("info: %+v %v", info, err)
	}

	// The SDK with the seed file: the publisher's rights, its tenant stamped.
	c, err := client.Connect(ctx, e.url, client.WithNkeySeed(seedFile), client.WithUser("nk-pub"))
	if err != nil {
		t.Fatalf("connect with the seed: %v", err)
	}
	defer c.Close()
	ack, err := c.Publish(ctx, "orders.acme.1", []byte(`{"n":1}`))
	if err != nil {
		t.Fatalf("publish on its subject: %v", err)
	}
	if got := e.stored(ack.Sequence).Header.Get(semaq.HdrTenant); got != "acme" {
		t.Fatalf("stored tenant %q, want acme", got)
	}
	if _, err := c.Publish(ctx, "orders.acme.2", []byte(`{}`), client.WithTenant("globex")); !errors.Is(err, semaq.ErrForbidden) {
		t.Fatalf("another tenant named: %v, want ErrForbidden", err)
	}
	// Outside its grants, the NATS server refuses.
	errOpt, errs := permErrs()
	closed := make(chan struct{})
	nc, err := nats.Connect(e.url, nats.Nkey(pub, signer(kp)), nats.CustomInboxPrefix(semaq.UserInboxPrefix+"nk-pub"),
		errOpt, nats.MaxReconnects(0), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatalf("a stock client with the nkey: %v", err)
	}
	defer nc.Close()
	if err := nc.Publish("billing.x", nil); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), "billing.x") {
			t.Fatalf("publish outside the grants: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("publish outside the grants not refused")
	}

	other, _, otherKP := newNkey(t)
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"signature by another key", []nats.Option{nats.Nkey(pub, signer(otherKP))}},
		{"garbage signature", []nats.Option{nats.Nkey(pub, func([]byte) ([]byte, error) { return []byte("sig"), nil })}},
		{"nkey of no user", []nats.Option{nats.Nkey(other, signer(otherKP))}},
		{"another user's name", []nats.Option{nats.Nkey(pub, signer(kp)), nats.UserInfo("acme-pub", "")}},
	} {
		_, err := nats.Connect(e.url, append([]nats.Option{nats.MaxReconnects(0)}, tc.opts...)...)
		authRefused(t, tc.name, err)
	}
	if _, err := client.Connect(ctx, e.url, client.WithNkeySeed(seedFile), client.WithUser("acme-pub")); err == nil {
		t.Fatal("the SDK connected with the nkey under another user's name")
	}

	// Refused at add: the nkey of another user, a seed, an account key.
	acct, _ := nkeys.CreateAccount()
	apub, _ := acct.PublicKey()
	seed, _ := kp.Seed()
	for _, tc := range []struct{ nkey, want string }{
		{pub, "already the credential of user nk-pub"},
		{string(seed), "seed"},
		{apub, "account"},
		{"UNOPE", "not a public nkey"},
	} {
		_, err := e.admin.AddUser(ctx, semaq.UserAddRequest{Name: "nk-2", Role: semaq.RoleAdmin, Nkey: tc.nkey})
		if !errors.Is(err, semaq.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("add with nkey %.8s…: %v, want a refusal saying %q", tc.nkey, err, tc.want)
		}
		if strings.Contains(err.Error(), string(seed)) {
			t.Fatal("the refusal echoes the seed")
		}
	}

	// The store holds the public key, nothing secret.
	js, err := jetstream.New(e.op)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, reserved.UserBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, "nk-pub")
	if err != nil {
		t.Fatal(err)
	}
	if v := string(entry.Value()); !strings.Contains(v, pub) || strings.Contains(v, string(seed)) || !strings.Contains(v, `"keys":[]`) {
		t.Fatalf("stored user: %s", v)
	}

	// Removal closes both connections and refuses the nkey from then on.
	rm, err := e.admin.RemoveUser(ctx, "nk-pub")
	if err != nil || rm.Closed != 2 {
		t.Fatalf("rm: %+v %v, want 2 connections closed", rm, err)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the removed user's connection is still open")
	}
	_, err = nats.Connect(e.url, nats.Nkey(pub, signer(kp)), nats.MaxReconnects(0))
	authRefused(t, "removed user", err)
}

// The nkey of an operator (or a node user) is the node's: the node
// admits it before asking the store, so no store user may have it.
func TestNkeyOfTheNodeRefused(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	opPub, _ := kp.PublicKey()
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP, cfg.Auth = t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", true
	s, err := node.New(cfg, nil, broker.WithOperator(opPub))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	_, err = admin.AddUser(ctx, semaq.UserAddRequest{Name: "fake-op", Role: semaq.RoleReader, Subjects: []string{"x.>"}, Nkey: opPub})
	if !errors.Is(err, semaq.ErrBadRequest) || !strings.Contains(err.Error(), "node's own users or operators") {
		t.Fatalf("add with the operator's nkey: %v, want a refusal", err)
	}
	// The operator itself still connects with every right.
	nc, err := nats.Connect(s.ClientURL(), nats.Nkey(opPub, signer(kp)), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

// Revocation follows the store for nkey users too: a removal written
// straight into the bucket, as a peer node's write arrives, closes the
// connection made with the nkey; a key rotation closes it as well.
func TestNkeyRevocationFollowsTheStore(t *testing.T) {
	e := newTenantEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, revoke := range []string{"rotate", "bucket delete"} {
		t.Run(revoke, func(t *testing.T) {
			name := "nk-" + strings.ReplaceAll(revoke, " ", "-")
			pub, _, kp := newNkey(t)
			if _, err := e.admin.AddUser(ctx, semaq.UserAddRequest{Name: name, Role: semaq.RoleReader, Subjects: []string{"orders.>"}, Nkey: pub}); err != nil {
				t.Fatal(err)
			}
			closed := make(chan struct{})
			nc, err := nats.Connect(e.url, nats.Nkey(pub, signer(kp)), nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if revoke == "rotate" {
				if _, err := e.admin.RotateKey(ctx, name); err != nil {
					t.Fatal(err)
				}
			} else {
				js, err := jetstream.New(e.op)
				if err != nil {
					t.Fatal(err)
				}
				kv, err := js.KeyValue(ctx, reserved.UserBucket)
				if err != nil {
					t.Fatal(err)
				}
				if err := kv.Delete(ctx, name); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-closed:
			case <-ctx.Done():
				t.Fatal("the nkey connection is still open")
			}
		})
	}
}
