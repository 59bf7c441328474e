package hostile

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Identities (docs/security.md): a broker started with auth on, and
// clients that try what their role does not allow.

func authBroker(t *testing.T) (*broker.Server, *client.Client) {
	t.Helper()
	s := brokertest.Start(t, brokertest.WithAuth)
	return s, brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
}

func addUser(t *testing.T, admin *client.Client, r semaq.UserAddRequest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := admin.AddUser(ctx, r)
	if err != nil {
		t.Fatalf("add user %s: %v", r.Name, err)
	}
	if !strings.HasPrefix(resp.Key, "sq_"+r.Name+"_") {
		t.Fatalf("add user %s: key of the wrong form", r.Name)
	}
	return resp.Key
}

// probe is a raw NATS connection of one user that sees the server's
// permission errors in order.
type probe struct {
	nc   *nats.Conn
	errs chan error
	n    atomic.Int64
}

func dialKey(t *testing.T, s *broker.Server, key string, opts ...nats.Option) (*nats.Conn, error) {
	t.Helper()
	k, err := identity.ParseKey(key)
	if err != nil {
		return nil, err
	}
	return nats.Connect(s.ClientURL(), append([]nats.Option{nats.Token(key),
		nats.CustomInboxPrefix(semaq.UserInboxPrefix + k.Name), nats.MaxReconnects(0)}, opts...)...)
}

func newProbe(t *testing.T, s *broker.Server, key string) *probe {
	t.Helper()
	p := &probe{errs: make(chan error, 64)}
	nc, err := dialKey(t, s, key, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case p.errs <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatalf("connect with key: %v", err)
	}
	t.Cleanup(nc.Close)
	p.nc = nc
	return p
}

// next waits for the next permission error.
func (p *probe) next(t *testing.T) string {
	t.Helper()
	select {
	case err := <-p.errs:
		return err.Error()
	case <-time.After(10 * time.Second):
		t.Fatal("no permission error from the server")
		return ""
	}
}

// do runs op, then an action no user may take (a publish to $SYS), and
// returns whether op was refused: the server answers in order, so the
// first error is op's when op was refused, the sentinel's when not.
func (p *probe) do(t *testing.T, op func() error) bool {
	t.Helper()
	if err := op(); err != nil {
		t.Fatalf("client side: %v", err)
	}
	sentinel := fmt.Sprintf("$SYS.SENTINEL.%d", p.n.Add(1))
	if err := p.nc.Publish(sentinel, nil); err != nil {
		t.Fatal(err)
	}
	_ = p.nc.Flush()
	first := p.next(t)
	if strings.Contains(first, sentinel) {
		return false
	}
	if got := p.next(t); !strings.Contains(got, sentinel) {
		t.Fatalf("expected the sentinel's refusal, got %q", got)
	}
	return true
}

func (p *probe) pub(t *testing.T, subj string) bool {
	t.Helper()
	return p.do(t, func() error { return p.nc.PublishRequest(subj, p.nc.NewRespInbox(), []byte("{}")) })
}

func (p *probe) sub(t *testing.T, subj string) bool {
	t.Helper()
	return p.do(t, func() error { _, err := p.nc.SubscribeSync(subj); return err })
}

func TestAuthRefusesWithoutAValidKey(t *testing.T) {
	s, admin := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := addUser(t, admin, semaq.UserAddRequest{Name: "pub1", Role: semaq.RolePublisher, Subjects: []string{"ai.>"}})
	k, _ := identity.ParseKey(key)
	wrong := identity.Key{Name: k.Name, ID: k.ID, Secret: make([]byte, 32)}.String()
	otherName := identity.Key{Name: "admin", ID: k.ID, Secret: k.Secret}.String()

	removed := addUser(t, admin, semaq.UserAddRequest{Name: "gone", Role: semaq.RoleReader, Subjects: []string{"ai.>"}})
	if _, err := admin.RemoveUser(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	rotated := addUser(t, admin, semaq.UserAddRequest{Name: "rot", Role: semaq.RoleReader, Subjects: []string{"ai.>"}})
	fresh, err := admin.RotateKey(ctx, "rot")
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"no key", nil},
		{"malformed token", []nats.Option{nats.Token("sq_nope")}},
		{"long garbage", []nats.Option{nats.Token(strings.Repeat("A", 3000))}},
		{"wrong secret", []nats.Option{nats.Token(wrong)}},
		{"key ID under another name", []nats.Option{nats.Token(otherName)}},
		{"password of another user", []nats.Option{nats.UserInfo("admin", key)}},
		{"removed user", []nats.Option{nats.Token(removed)}},
		{"rotated-away key", []nats.Option{nats.Token(rotated)}},
		{"secret alone", []nats.Option{nats.Token(base64.RawURLEncoding.EncodeToString(k.Secret))}},
		{"unknown nkey", []nats.Option{nats.Nkey("UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", func([]byte) ([]byte, error) { return []byte("sig"), nil })}},
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
	// The good keys work, as token or as user/password.
	for _, opt := range []nats.Option{nats.Token(key), nats.UserInfo("pub1", key), nats.Token(fresh.Key)} {
		nc, err := nats.Connect(s.ClientURL(), opt, nats.MaxReconnects(0))
		if err != nil {
			t.Fatalf("good key refused: %v", err)
		}
		nc.Close()
	}
}

func TestAuthRevocationClosesConnections(t *testing.T) {
	s, admin := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, revoke := range []string{"rm", "rotate"} {
		t.Run(revoke, func(t *testing.T) {
			name := "victim-" + revoke
			key := addUser(t, admin, semaq.UserAddRequest{Name: name, Role: semaq.RoleReader, Subjects: []string{"ai.>"}})
			closed := make(chan struct{})
			nc, err := dialKey(t, s, key, nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if revoke == "rm" {
				resp, err := admin.RemoveUser(ctx, name)
				if err != nil || resp.Closed != 1 {
					t.Fatalf("rm: %+v %v", resp, err)
				}
			} else if _, err := admin.RotateKey(ctx, name); err != nil {
				t.Fatal(err)
			}
			select {
			case <-closed:
			case <-ctx.Done():
				t.Fatal("the revoked user's connection is still open")
			}
			if nc2, err := dialKey(t, s, key); err == nil {
				nc2.Close()
				t.Fatal("the revoked key connects again")
			}
		})
	}
}

// A key past its expiry is refused, and the NATS server closes the
// connections it opened when it expires.
func TestAuthExpiredKey(t *testing.T) {
	s, admin := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "short", Role: semaq.RoleReader, Subjects: []string{"ai.>"}, ExpiresIn: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.User.Keys) != 1 || r.User.Keys[0].Expires.IsZero() {
		t.Fatalf("the user's key shows no expiry: %+v", r.User.Keys)
	}
	closed := make(chan struct{})
	nc, err := dialKey(t, s, r.Key, nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatalf("before its expiry: %v", err)
	}
	defer nc.Close()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the connection of an expired key is still open")
	}
	if !time.Now().After(r.User.Keys[0].Expires) {
		t.Fatalf("closed at %s, before the key's expiry %s", time.Now(), r.User.Keys[0].Expires)
	}
	if nc2, err := dialKey(t, s, r.Key); err == nil {
		nc2.Close()
		t.Fatal("an expired key connects")
	}
	for _, bad := range []time.Duration{-time.Second, semaq.MaxKeyLifetime + time.Hour} {
		if _, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "bad", Role: semaq.RoleReader, Subjects: []string{"ai.>"}, ExpiresIn: bad}); !errors.Is(err, semaq.ErrBadRequest) {
			t.Fatalf("expires_in %s: %v, want a refusal", bad, err)
		}
	}
}

func TestAuthRoles(t *testing.T) {
	s, admin := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokertest.AddStream(t, admin, "INF", "ai.inference.>")
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "INFER_A", Subjects: []string{"jobs.a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "OTHER", Subjects: []string{"jobs.o"}}); err != nil {
		t.Fatal(err)
	}
	pubKey := addUser(t, admin, semaq.UserAddRequest{Name: "ingest", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"ai.inference.>"}})
	readKey := addUser(t, admin, semaq.UserAddRequest{Name: "alice", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"results.acme.>"}})
	workKey := addUser(t, admin, semaq.UserAddRequest{Name: "gpu-7", Role: semaq.RoleWorker, Queues: []string{"INFER_*"}})
	svcKey := addUser(t, admin, semaq.UserAddRequest{Name: "svc", Role: semaq.RoleService, Subjects: []string{"svc.>"}})

	t.Run("publisher", func(t *testing.T) {
		c := brokertest.ConnectKey(t, s, pubKey)
		if _, err := c.Publish(ctx, "ai.inference.llm", []byte("hi")); err != nil {
			t.Fatalf("publish on its subject: %v", err)
		}
		p := newProbe(t, s, pubKey)
		for subj, want := range map[string]bool{
			"ai.inference.x": false,
			"ai.other.x":     true,
			fmt.Sprintf(semaq.APIStreamCreateT, "NEW"): true,
			semaq.APIUserAdd:          true,
			"$SQ.w.ai.inference.x":    true,
			"$JS.API.STREAM.INFO.INF": true,
			semaq.APIInfo:             false,
		} {
			if got := p.pub(t, subj); got != want {
				t.Errorf("publish %s refused=%v, want %v", subj, got, want)
			}
		}
		for subj, want := range map[string]bool{
			"ai.inference.>":           true,
			"_INBOX_alice.>":           true,
			"_INBOX.>":                 true,
			">":                        true,
			"_INBOX_ingest.x.y":        false,
			semaq.QueueAckPrefix + ">": true,
		} {
			if got := p.sub(t, subj); got != want {
				t.Errorf("subscribe %s refused=%v, want %v", subj, got, want)
			}
		}
	})
	t.Run("reader", func(t *testing.T) {
		p := newProbe(t, s, readKey)
		for subj, want := range map[string]bool{
			"results.acme.x": true,
			"ai.inference.x": true,
			// The broker checks the grants of these itself
			// (internal/broker TestFilterAndKeySharedChecksTheReadersGrants).
			semaq.APIFilterStart:                           false,
			semaq.APIKeySharedJoin:                         false,
			"$JS.API.CONSUMER.CREATE.INF.c.results.acme.>": false,
			"$JS.API.CONSUMER.CREATE.INF.c.ai.inference.>": true,
			"$JS.API.CONSUMER.CREATE.INF":                  true,
			semaq.APIUserList:                              true,
		} {
			if got := p.pub(t, subj); got != want {
				t.Errorf("publish %s refused=%v, want %v", subj, got, want)
			}
		}
		for subj, want := range map[string]bool{
			"results.acme.>":  false,
			"results.other":   true,
			"_INBOX_ingest.>": true,
		} {
			if got := p.sub(t, subj); got != want {
				t.Errorf("subscribe %s refused=%v, want %v", subj, got, want)
			}
		}
	})
	t.Run("worker", func(t *testing.T) {
		p := newProbe(t, s, workKey)
		for subj, want := range map[string]bool{
			fmt.Sprintf(semaq.APIQueueFetchT, "INFER_A"): false,
			// The broker refuses fetches outside the globs (below);
			// answers need the job's lease.
			semaq.QueueAckPrefix + "OTHER.1.x": false,
			"$SQ.w.jobs.a":                     true,
			"jobs.a":                           true,
			semaq.TokenWritePrefix + "k.c":     false,
		} {
			if got := p.pub(t, subj); got != want {
				t.Errorf("publish %s refused=%v, want %v", subj, got, want)
			}
		}
		c := brokertest.ConnectKey(t, s, workKey)
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		defer fcancel()
		if _, err := c.Fetch(fctx, "INFER_A", client.FetchWait(100*time.Millisecond)); err != nil {
			t.Fatalf("fetch from its queue: %v", err)
		}
		if _, err := c.Fetch(fctx, "OTHER", client.FetchWait(100*time.Millisecond)); !errors.Is(err, semaq.ErrForbidden) ||
			!strings.Contains(err.Error(), "gpu-7") {
			t.Fatalf("fetch outside its globs: %v, want a refusal naming the user", err)
		}
	})
	t.Run("service", func(t *testing.T) {
		p := newProbe(t, s, svcKey)
		if p.pub(t, "svc.x") || !p.pub(t, "ai.inference.x") || p.sub(t, "svc.>") || !p.sub(t, "ai.>") {
			t.Error("service rights are not publisher+reader on its subjects")
		}
	})
	t.Run("admin and operator", func(t *testing.T) {
		if _, err := admin.Users(ctx); err != nil {
			t.Fatalf("admin lists users: %v", err)
		}
		op, err := brokertest.DialOperator(s)
		if err != nil {
			t.Fatalf("operator refused: %v", err)
		}
		defer op.Close()
		if err := op.Publish("$SQ.w.operator.test", nil); err != nil {
			t.Fatal(err)
		}
		if err := op.Flush(); err != nil || op.LastError() != nil {
			t.Fatalf("operator: %v %v", err, op.LastError())
		}
		// Over HTTP the admin's key publishes through the ingress, its
		// PubAck coming back over the egress user.
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr()+"/api/v1/publish/ai.inference.http", strings.NewReader(`{"x":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+brokertest.AdminKey(t, s))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"stream":"INF"`) {
			t.Fatalf("HTTP publish with auth on: %d %s", resp.StatusCode, b)
		}
	})
}

// The store keeps no secret in clear, and the bootstrap admin key is
// readable by its owner only.
func TestAuthStoreKeepsNoSecret(t *testing.T) {
	s, admin := authBroker(t)
	key := addUser(t, admin, semaq.UserAddRequest{Name: "ingest", Role: semaq.RolePublisher, Subjects: []string{"ai.>"}})
	k, _ := identity.ParseKey(key)
	op, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	js, err := jetstream.New(op)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, reserved.UserBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "ingest")
	if err != nil {
		t.Fatal(err)
	}
	v := string(e.Value())
	for _, secret := range []string{key, base64.RawURLEncoding.EncodeToString(k.Secret), base64.StdEncoding.EncodeToString(k.Secret)} {
		if strings.Contains(v, secret) {
			t.Fatal("the stored user holds the secret")
		}
	}
	sum := sha256.Sum256(k.Secret)
	if !strings.Contains(v, base64.StdEncoding.EncodeToString(sum[:])) {
		t.Fatalf("the stored user does not hold the secret's SHA-256: %s", v)
	}
	fi, err := os.Stat(filepath.Join(s.Config().DataDir, broker.AdminKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin key file: %v %v", fi.Mode(), err)
	}
}

// A client outside the store cannot reach the bucket, even as a reader
// granted subjects that look like it.
func TestAuthPublicCannotReadUsers(t *testing.T) {
	s, admin := authBroker(t)
	key := addUser(t, admin, semaq.UserAddRequest{Name: "alice", Role: semaq.RoleReader, Subjects: []string{"kv.>"}})
	p := newProbe(t, s, key)
	if !p.sub(t, "$KV."+reserved.UserBucket+".>") || !p.pub(t, "$JS.API.DIRECT.GET.KV_"+reserved.UserBucket) {
		t.Fatal("a reader reaches SQ_USERS")
	}
	// Nor does an admin: the user API is how users are read.
	pa := newProbe(t, s, brokertest.AdminKey(t, s))
	for _, subj := range []string{"$JS.API.DIRECT.GET.KV_" + reserved.UserBucket, "$JS.API.DIRECT.GET.KV_" + reserved.UserBucket + ".$KV.SQ_USERS.alice",
		"$JS.API.STREAM.MSG.GET.KV_" + reserved.UserBucket, "$JS.API.CONSUMER.CREATE.KV_" + reserved.UserBucket + ".x.>", "$KV." + reserved.UserBucket + ".alice"} {
		if !pa.pub(t, subj) {
			t.Errorf("an admin reaches SQ_USERS by %s", subj)
		}
	}
}

// Repeated failures from one address are slowed down: after the free
// ones, each attempt waits before it is checked, and every refusal is
// counted by reason. (The limiter's bound under many addresses is
// internal/broker/auth TestLimiterBounded: a test client has one.)
func TestAuthSlowsDownRepeatedFailures(t *testing.T) {
	s, admin := authBroker(t)
	key := addUser(t, admin, semaq.UserAddRequest{Name: "pub1", Role: semaq.RolePublisher, Subjects: []string{"ai.>"}})
	k, _ := identity.ParseKey(key)
	wrong := identity.Key{Name: k.Name, ID: k.ID, Secret: make([]byte, 32)}.String()
	attempt := func() time.Duration {
		start := time.Now()
		nc, err := nats.Connect(s.ClientURL(), nats.Token(wrong), nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			t.Fatal("a wrong key connected")
		}
		return time.Since(start)
	}
	for range 5 { // free failures (auth.DefaultLimiter)
		attempt()
	}
	// Lower bounds only: a slow machine adds time, never removes it.
	if d := attempt(); d < 100*time.Millisecond {
		t.Fatalf("6th failure answered after %v, want at least 100ms", d)
	}
	if d := attempt(); d < 200*time.Millisecond {
		t.Fatalf("7th failure answered after %v, want at least 200ms", d)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+brokertest.AdminKey(t, s))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `semaq_auth_failures_total{reason="unknown_key"} 7`) {
		t.Fatalf("failures not counted:\n%s", grepLines(string(body), "semaq_auth"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
