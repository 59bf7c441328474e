package broker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// authCluster is a 3-node cluster with auth on, its admin connected
// through n1, and the keys of the users it added there.
type authCluster struct {
	t     *testing.T
	c     *brokertest.Cluster
	admin *client.Client
	keys  map[string]string
}

// startAuthCluster starts the nodes together on empty data directories,
// so every one of them finds no admin in the store at its start.
func startAuthCluster(t *testing.T) *authCluster {
	t.Helper()
	c := brokertest.StartCluster(t, 3, brokertest.WithAuth)
	// Exactly one node made the admin and wrote its key.
	var key string
	var holders []string
	for _, s := range c.Nodes() {
		b, err := os.ReadFile(filepath.Join(s.Config().DataDir, broker.AdminKeyFile))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		key = strings.TrimSpace(string(b))
		holders = append(holders, s.Config().Name)
	}
	if len(holders) != 1 {
		t.Fatalf("admin keys written by %v, want exactly one node", holders)
	}
	return &authCluster{t: t, c: c, admin: brokertest.ConnectKey(t, c.Node(0), key), keys: map[string]string{"admin": key}}
}

// add adds users through the admin's node, n1.
func (a *authCluster) add(users ...semaq.UserAddRequest) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, u := range users {
		r, err := a.admin.AddUser(ctx, u)
		if err != nil {
			a.t.Fatalf("add user %s: %v", u.Name, err)
		}
		a.keys[u.Name] = r.Key
	}
}

// conn connects as user name to node i with a plain NATS client that does
// not reconnect; closed is closed when the server closes it.
func (a *authCluster) conn(name string, i int) (nc *nats.Conn, closed <-chan struct{}) {
	a.t.Helper()
	ch := make(chan struct{})
	nc, err := nats.Connect(a.c.Node(i).ClientURL(), nats.UserInfo(name, a.keys[name]),
		nats.CustomInboxPrefix(semaq.UserInboxPrefix+name), nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { close(ch) }))
	if err != nil {
		a.t.Fatalf("connect as %s to n%d: %v", name, i+1, err)
	}
	a.t.Cleanup(nc.Close)
	return nc, ch
}

// The admin is made once when the nodes start together, and its key, like
// every user's added through n1, opens every node at once.
func TestClusterAuthUsersEveryNode(t *testing.T) {
	t.Parallel()
	a := startAuthCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	users, err := a.admin.Users(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admins := 0
	for _, u := range users {
		if u.Role == semaq.RoleAdmin {
			admins++
		}
	}
	if admins != 1 {
		t.Fatalf("users after the nodes started together: %+v, want one admin", users)
	}
	for i := range 3 {
		brokertest.ConnectKey(t, a.c.Node(i), a.keys["admin"])
	}
	// The nodes' reports to each other are on the broker's own inbox:
	// no user may listen there, the admin included.
	a.add(semaq.UserAddRequest{Name: "watcher", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}})
	for _, name := range []string{"watcher", "admin"} {
		errs := make(chan error, 4)
		nc, err := nats.Connect(a.c.Node(1).ClientURL(), nats.UserInfo(name, a.keys[name]),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.SubscribeSync("_SQ_NODE.>"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Fatalf("%s subscribing to the node reports: %v", name, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s subscribed to the node reports", name)
		}
		nc.Close()
	}
	// Several users, each tried on the other nodes right after its add
	// returned: a race with the other nodes' stores would show.
	for _, name := range []string{"u1", "u2", "u3", "u4", "u5"} {
		a.add(semaq.UserAddRequest{Name: name, Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}})
		for i := 1; i < 3; i++ {
			nc, _ := a.conn(name, i)
			nc.Close()
		}
	}
}

// Tenancy holds across nodes: a publisher's tenant is stamped from its
// identity on whichever node it publishes, another tenant's core
// messages published on one node do not reach a reader on another, and a
// stream created after a user connected is reachable from that user's
// account on every node the moment its add returns.
func TestClusterAuthTenancy(t *testing.T) {
	t.Parallel()
	a := startAuthCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := a.admin.AddStream(ctx, semaq.StreamConfig{Name: "ORD", Subjects: []string{"orders.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	a.add(
		semaq.UserAddRequest{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"orders.>", "late.>"}},
		semaq.UserAddRequest{Name: "globex-pub", Tenant: "globex", Role: semaq.RolePublisher, Subjects: []string{"orders.>"}},
		semaq.UserAddRequest{Name: "acme-read", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
		semaq.UserAddRequest{Name: "globex-read", Tenant: "globex", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
	)
	js := internalJS(t, a.c.Node(0))
	stored := func(stream string, seq uint64) *jetstream.RawStreamMsg {
		t.Helper()
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("%s message %d: %v", stream, seq, err)
		}
		return m
	}

	t.Run("tenant stamped on n3", func(t *testing.T) {
		pub, _ := a.conn("acme-pub", 2)
		ack, apiErr := publishAs(t, pub, "orders.acme.1", nil)
		if apiErr != nil {
			t.Fatalf("refused: %v", apiErr)
		}
		if got := stored("ORD", ack.Sequence).Header.Get(semaq.HdrTenant); got != "acme" {
			t.Fatalf("stored tenant %q, want acme", got)
		}
		if _, apiErr := publishAs(t, pub, "orders.acme.2", nats.Header{semaq.HdrTenant: {"globex"}}); !errors.Is(apiErr, semaq.ErrForbidden) {
			t.Fatalf("spoofed tenant on n3: %v, want a refusal", apiErr)
		}
		info, err := a.admin.StreamInfo(ctx, "ORD")
		if err != nil {
			t.Fatal(err)
		}
		if info.State.LastSeq != ack.Sequence {
			t.Fatalf("the refused message was stored: last sequence %d, want %d", info.State.LastSeq, ack.Sequence)
		}
	})

	t.Run("core messages stay in their tenant across nodes", func(t *testing.T) {
		acme, _ := a.conn("acme-read", 1)
		globex, _ := a.conn("globex-read", 1)
		acmeGot := watchWithMarker(t, acme, "acme-read")
		globexSub, err := globex.SubscribeSync("orders.>")
		if err != nil {
			t.Fatal(err)
		}
		if err := globex.Flush(); err != nil {
			t.Fatal(err)
		}
		pub, _ := a.conn("globex-pub", 0)
		// The readers' interest crosses the routes after their flush:
		// wait until globex's own reader on n2 gets globex's messages.
		seen := false
		for i := 0; !seen && i < 100; i++ {
			if _, apiErr := publishAs(t, pub, "orders.globex.secret", nil); apiErr != nil {
				t.Fatal(apiErr)
			}
			m, err := globexSub.NextMsg(100 * time.Millisecond)
			seen = err == nil && m.Subject == "orders.globex.secret"
		}
		if !seen {
			t.Fatal("globex's reader on n2 never got globex's message published on n1")
		}
		// Acked, so it went through the node's account on n1, and over
		// the route of that account to n2, before the operator's marker
		// there: a leak to acme would arrive first.
		op, err := brokertest.DialOperator(a.c.Node(0))
		if err != nil {
			t.Fatal(err)
		}
		defer op.Close()
		expectMarkerFirst(t, op, "acme-read", acmeGot)
	})

	t.Run("stream made after the user connected", func(t *testing.T) {
		// Connected before the stream exists, on the two nodes that do
		// not answer its add.
		pubs := []*nats.Conn{}
		for i := 1; i < 3; i++ {
			nc, _ := a.conn("acme-pub", i)
			pubs = append(pubs, nc)
		}
		for _, round := range []string{"a", "b", "c"} {
			name, subj := "LATE"+strings.ToUpper(round), "late."+round
			if _, err := a.admin.AddStream(ctx, semaq.StreamConfig{Name: name, Subjects: []string{subj + ".>"}, Replicas: 3}); err != nil {
				t.Fatal(err)
			}
			for i, pub := range pubs {
				ack, apiErr := publishAs(t, pub, subj+".x", nil)
				if apiErr != nil {
					t.Fatalf("n%d, right after %s was added: %v", i+2, name, apiErr)
				}
				if ack.Stream != name {
					t.Fatalf("n%d: stored in %s, want %s", i+2, ack.Stream, name)
				}
			}
		}
	})
}

// A worker on one node fetches from a queue another node dispatches, and
// only from the queues its globs grant.
func TestClusterAuthWorkerRemoteQueue(t *testing.T) {
	t.Parallel()
	a := startAuthCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a.add(
		semaq.UserAddRequest{Name: "gpu", Role: semaq.RoleWorker, Queues: []string{"INFER_*"}},
		semaq.UserAddRequest{Name: "ingest", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"jobs.>"}},
	)
	js := internalJS(t, a.c.Node(0))
	for _, q := range []semaq.QueueConfig{{Name: "INFER_A", Subjects: []string{"jobs.a"}}, {Name: "OTHER", Subjects: []string{"jobs.other"}}} {
		if _, err := a.admin.AddQueue(ctx, q); err != nil {
			t.Fatal(err)
		}
		// Published right after the add, on every node: each node's
		// ingress and user accounts serve the queue when its add returns.
		for i := range 3 {
			ingest, _ := a.conn("ingest", i)
			if _, apiErr := publishAs(t, ingest, q.Subjects[0], nats.Header{semaq.HdrMsgID: {q.Name + string(rune('0'+i))}}); apiErr != nil {
				t.Fatalf("n%d, right after queue %s was added: %v", i+1, q.Name, apiErr)
			}
		}
	}
	lead := queueLeader(t, a.c, js, "INFER_A")
	far := (lead + 1) % 3
	worker := brokertest.ConnectKey(t, a.c.Node(far), a.keys["gpu"])
	jobs, err := worker.Fetch(ctx, "INFER_A", client.FetchMax(3), client.FetchWait(2*time.Second))
	if err != nil || len(jobs) != 3 {
		t.Fatalf("fetch on n%d from a queue n%d dispatches: %d jobs, %v", far+1, lead+1, len(jobs), err)
	}
	for _, j := range jobs {
		if got := j.Header.Get(semaq.HdrTenant); got != "acme" {
			t.Fatalf("job's tenant %q, want the publisher's, acme", got)
		}
		if err := j.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := worker.Fetch(ctx, "OTHER", client.FetchWait(100*time.Millisecond)); !errors.Is(err, semaq.ErrForbidden) ||
		!strings.Contains(err.Error(), "INFER_*") {
		t.Fatalf("fetch outside the globs: %v, want a refusal naming the globs", err)
	}
}

// A rotation or a removal answered by n1 closes the user's connections on
// n3, and the old key opens n3 no more once it returns.
func TestClusterAuthRevocationEveryNode(t *testing.T) {
	t.Parallel()
	a := startAuthCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a.add(
		semaq.UserAddRequest{Name: "rot", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
		semaq.UserAddRequest{Name: "gone", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
	)
	for _, tc := range []struct {
		user   string
		revoke func() error
	}{
		{"rot", func() error { _, err := a.admin.RotateKey(ctx, "rot"); return err }},
		{"gone", func() error { _, err := a.admin.RemoveUser(ctx, "gone"); return err }},
	} {
		_, closed := a.conn(tc.user, 2)
		if err := tc.revoke(); err != nil {
			t.Fatal(err)
		}
		if nc, err := nats.Connect(a.c.Node(2).ClientURL(), nats.UserInfo(tc.user, a.keys[tc.user]), nats.NoReconnect()); err == nil {
			nc.Close()
			t.Fatalf("%s: the revoked key opened n3 after the revocation returned", tc.user)
		}
		select {
		case <-closed:
		case <-ctx.Done():
			t.Fatalf("%s: the connection on n3 is still open", tc.user)
		}
	}
}

// A user added while one node of three is stopped — the one leading the
// identity store, the worst case — returns within the SDK's wait for a
// key's answer (which is longer than the broker's own bounds) with the
// user's key, never names the stopped node as lagging, and the user then
// connects through the third node.
func TestClusterUserAddWithANodeDown(t *testing.T) {
	t.Parallel()
	a := startAuthCluster(t)
	down := a.c.StreamLeader("KV_" + reserved.UserBucket)
	via, other := (down+1)%3, (down+2)%3
	downName := a.c.Node(down).Config().Name
	a.c.Stop(down)
	var lagging []string
	c, err := client.Connect(context.Background(), a.c.Node(via).ClientURL(), client.WithKey(a.keys["admin"]),
		client.WithLagging(func(_ string, nodes []string) { lagging = nodes }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// The SDK's own wait for a key's answer, which `semaq user add` uses.
	start := time.Now()
	resp, err := c.AddUser(context.Background(), semaq.UserAddRequest{Name: "late", Role: semaq.RolePublisher, Subjects: []string{"orders.>"}})
	if err != nil {
		t.Fatalf("user add with the store's leader down, after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	t.Logf("user add with the store's leader down took %s", time.Since(start).Round(time.Millisecond))
	if !strings.HasPrefix(resp.Key, "sq_late_") {
		t.Fatalf("user add answered no key: %+v", resp)
	}
	// A live node whose watcher of the store had followed the stopped
	// leader applies the change late and is named (its watcher notices
	// the loss after its heartbeat); the stopped node is not part of the
	// cluster the change waits for, and is never named.
	if slices.Contains(lagging, downName) {
		t.Fatalf("user add named the stopped node %s lagging: %v", downName, lagging)
	}
	t.Logf("lagging: %v", lagging)
	a.c.Eventually(20*time.Second, "the new user to connect through the third node", func() error {
		k, err := identity.ParseKey(resp.Key)
		if err != nil {
			return err
		}
		nc, err := nats.Connect(a.c.Node(other).ClientURL(), nats.Token(resp.Key), nats.CustomInboxPrefix(semaq.UserInboxPrefix+k.Name), nats.MaxReconnects(0))
		if err != nil {
			return err
		}
		nc.Close()
		return nil
	})
}
