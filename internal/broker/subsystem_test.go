package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// toy is the smallest subsystem a node can be given: a stream of its own,
// one API subject, one goroutine. It is what docs/architecture.md builds.
type toy struct {
	core   subsystem.Core
	closed *atomic.Int32 // Close calls, across the cluster's nodes
}

const (
	toyStream  = "SQ_TOY"
	toySubject = "$SQ.API.TOY.PING"
)

// toyClosed are what no client may do with the toy's stream: read it,
// consume it, delete it, publish into it.
var toyClosed = []string{
	"$JS.API.STREAM.MSG.GET." + toyStream,
	"$JS.API.DIRECT.GET." + toyStream,
	"$JS.API.CONSUMER.CREATE." + toyStream + ".peek",
	"$JS.API.STREAM.DELETE." + toyStream,
	reserved.StoragePrefix + "$toy.forged",
}

// expectRefused publishes on subject and waits for the NATS server's
// permissions violation naming it, on refused (the connection's errors).
func expectRefused(ctx context.Context, t *testing.T, nc *nats.Conn, refused <-chan error, who, subject string) {
	t.Helper()
	if err := nc.Publish(subject, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refused:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
			t.Fatalf("%s: %s: %v, want a permissions violation naming it", who, subject, err)
		}
	case <-ctx.Done():
		t.Fatalf("%s: %s: not refused", who, subject)
	}
}

func toySpec(closed, running *atomic.Int32) subsystem.Spec {
	return subsystem.Spec{
		Name: "toy",
		Resources: []reserved.Resource{
			{Stream: toyStream, Owner: "toy", Access: reserved.Hidden, Replicated: true},
		},
		Services: []reserved.Service{{Subject: toySubject}},
		Open: func(ctx context.Context, core subsystem.Core) (subsystem.Subsystem, error) {
			_, err := jsutil.EnsureStream(ctx, core.JS, jetstream.StreamConfig{
				Name:     toyStream,
				Subjects: []string{reserved.StoragePrefix + "$toy.>"},
				Replicas: core.Replicas(),
				Storage:  jetstream.MemoryStorage,
			})
			if err != nil {
				return nil, err
			}
			ok := core.Gate.Go("waiter", func(ctx context.Context) {
				running.Add(1)
				defer running.Add(-1)
				<-ctx.Done()
			})
			if !ok {
				return nil, errors.New("toy: the gate refused a goroutine at open")
			}
			return &toy{core: core, closed: closed}, nil
		},
	}
}

func (t *toy) Handlers() api.Handlers {
	return api.Handlers{toySubject: api.Op(t.core.Log, "toy ping", func(ctx context.Context, _ *struct{}) (any, error) {
		if _, err := t.core.JS.Publish(ctx, reserved.StoragePrefix+"$toy.ping", []byte(t.core.Node)); err != nil {
			return nil, err
		}
		return map[string]string{"node": t.core.Node}, nil
	}, nil)}
}

func (t *toy) Close(context.Context) error {
	t.closed.Add(1)
	return nil
}

// TestToySubsystem builds a subsystem through the node's list on a
// three-node cluster: its API answers on every node, its stream is
// replicated with the cluster and closed to clients, and it closes (its
// goroutine too) when its node stops.
func TestToySubsystem(t *testing.T) {
	var closed, running atomic.Int32
	c := brokertest.StartClusterWith(t, 3, []broker.Option{broker.WithSubsystem(toySpec(&closed, &running))})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for i, n := range c.Nodes() {
		nc, err := nats.Connect(n.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		m, err := nc.RequestWithContext(ctx, toySubject, nil)
		if err != nil {
			t.Fatalf("node %d: %s: %v", i, toySubject, err)
		}
		var out map[string]string
		if err := json.Unmarshal(m.Data, &out); err != nil || out["node"] == "" {
			t.Fatalf("node %d: answer %q (%v)", i, m.Data, err)
		}
	}
	if got := running.Load(); got != 3 {
		t.Fatalf("%d toy goroutines run, want one per node", got)
	}

	op, err := brokertest.DialOperator(c.Node(0))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	js, err := jetstream.New(op)
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually(30*time.Second, "the toy's stream raised to R3", func() error {
		st, err := js.Stream(ctx, toyStream)
		if err != nil {
			return err
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			return errors.New("replicas " + string(rune('0'+r)))
		}
		return nil
	})

	// Closed to clients: reading it, making a consumer on it or deleting
	// it is refused by the NATS server.
	refused := make(chan error, 8)
	nc, err := nats.Connect(c.Node(1).ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		refused <- err
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, subj := range toyClosed {
		expectRefused(ctx, t, nc, refused, "a client", subj)
	}

	// Closing: the stopped node's toy closed, and its goroutine ended.
	c.Stop(2)
	if got := closed.Load(); got != 1 {
		t.Fatalf("toy closed %d times after one node stopped", got)
	}
	if got := running.Load(); got != 2 {
		t.Fatalf("%d toy goroutines run after one node stopped, want 2", got)
	}
}

// TestSubsystemSpecRefused: a subsystem declaring a stream the node keeps
// already, or with no way to open, is refused at New.
func TestSubsystemSpecRefused(t *testing.T) {
	open := func(context.Context, subsystem.Core) (subsystem.Subsystem, error) { return subsystem.None, nil }
	for name, spec := range map[string]subsystem.Spec{
		"a stream of the node's":     {Name: "dup", Open: open, Resources: []reserved.Resource{{Stream: "SQ_DLQ", Owner: "dup"}}},
		"a write outside $ and _SQ_": {Name: "open", Open: open, Resources: []reserved.Resource{{Stream: "SQ_X", Owner: "open", Writes: []string{"orders.>"}}}},
		"no Open":                    {Name: "none"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := broker.DefaultConfig()
			cfg.DataDir = t.TempDir()
			if _, err := broker.New(cfg, nil, broker.WithSubsystem(spec)); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

// TestToySubsystemUnderAuth: with --auth, a subsystem's API is the admin
// role's, like every management API the roles do not grant, and its
// stream is closed to every user, the admin included.
func TestToySubsystemUnderAuth(t *testing.T) {
	var closed, running atomic.Int32
	s := brokertest.StartWith(t, []broker.Option{broker.WithSubsystem(toySpec(&closed, &running))}, brokertest.WithAuth)
	adminKey := brokertest.AdminKey(t, s)
	admin := brokertest.ConnectKey(t, s, adminKey)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if m, err := admin.Conn().RequestWithContext(ctx, toySubject, nil); err != nil || !strings.Contains(string(m.Data), `"node"`) {
		t.Fatalf("admin: %s: %v", toySubject, err)
	}
	type attempt struct{ user, subject string }
	keys := map[string]string{"admin": adminKey}
	for _, u := range []semaq.UserAddRequest{
		{Name: "pub", Role: semaq.RolePublisher, Subjects: []string{"ai.>"}},
		{Name: "rd", Role: semaq.RoleReader, Subjects: []string{"ai.>"}},
		{Name: "svc", Role: semaq.RoleService, Subjects: []string{"ai.>"}, Tenant: "acme"},
	} {
		resp, err := admin.AddUser(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		keys[u.Name] = resp.Key
	}
	var attempts []attempt
	for _, u := range []string{"pub", "rd", "svc"} {
		attempts = append(attempts, attempt{u, toySubject}) // not their role's
	}
	for _, u := range []string{"admin", "pub", "rd", "svc"} {
		for _, subj := range toyClosed {
			attempts = append(attempts, attempt{u, subj})
		}
	}
	conns := map[string]*nats.Conn{}
	refused := map[string]chan error{}
	for user, key := range keys {
		k, err := identity.ParseKey(key)
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan error, 16)
		nc, err := nats.Connect(s.ClientURL(), nats.Token(key), nats.CustomInboxPrefix(semaq.UserInboxPrefix+k.Name),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { ch <- err }))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		defer nc.Close()
		conns[user], refused[user] = nc, ch
	}
	for _, a := range attempts {
		expectRefused(ctx, t, conns[a.user], refused[a.user], a.user, a.subject)
	}
}
