package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// tenantEnv is a node with auth on, a stream on orders.> and users of two
// tenants.
type tenantEnv struct {
	t     *testing.T
	url   string
	admin *client.Client
	op    *nats.Conn // an operator: the node's own account
	keys  map[string]string
}

func newTenantEnv(t *testing.T) *tenantEnv {
	t.Helper()
	s := brokertest.Start(t, brokertest.WithAuth)
	e := &tenantEnv{t: t, url: s.ClientURL(), admin: brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s)), keys: map[string]string{}}
	op, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	e.op = op
	brokertest.AddStream(t, e.admin, "ORD", "orders.>")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, u := range []semaq.UserAddRequest{
		{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"orders.>"}},
		{Name: "acme-read", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
		{Name: "globex-read", Tenant: "globex", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
		{Name: "gw", Role: semaq.RoleService, Subjects: []string{"orders.>"}},
		{Name: "nobody-pub", Role: semaq.RolePublisher, Subjects: []string{"orders.>"}},
	} {
		r, err := e.admin.AddUser(ctx, u)
		if err != nil {
			t.Fatalf("add user %s: %v", u.Name, err)
		}
		e.keys[u.Name] = r.Key
	}
	return e
}

// conn connects as user name with a plain NATS client.
func (e *tenantEnv) conn(name string) *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect(e.url, nats.UserInfo(name, e.keys[name]), nats.CustomInboxPrefix(semaq.UserInboxPrefix+name))
	if err != nil {
		e.t.Fatalf("connect as %s: %v", name, err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// publishAs sends one message as nc and returns the broker's answer.
func publishAs(t *testing.T, nc *nats.Conn, subject string, h nats.Header) (*jetstream.PubAck, *semaq.APIError) {
	t.Helper()
	m, err := nc.RequestMsg(&nats.Msg{Subject: subject, Header: h, Data: []byte(`{"n":1}`)}, 5*time.Second)
	if err != nil {
		t.Fatalf("publish on %s: %v", subject, err)
	}
	var r struct {
		jetstream.PubAck
		Error *semaq.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("answer %q: %v", m.Data, err)
	}
	if r.Error != nil {
		return nil, r.Error
	}
	return &r.PubAck, nil
}

// stored reads message seq of ORD as the node sees it.
func (e *tenantEnv) stored(seq uint64) *jetstream.RawStreamMsg {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(e.op)
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := js.Stream(ctx, "ORD")
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		e.t.Fatalf("stored message %d: %v", seq, err)
	}
	return m
}

// The tenant of a message is its publisher's, whatever the publisher
// writes: a spoofed AI-Tenant is refused and nothing is stored; none is
// stamped; a forged Nats-Request-Info changes nothing.
func TestTenantStampedFromIdentity(t *testing.T) {
	e := newTenantEnv(t)
	pub := e.conn("acme-pub")
	for _, tc := range []struct {
		name   string
		header nats.Header
	}{
		{"no tenant", nil},
		{"its own tenant", nats.Header{semaq.HdrTenant: {"acme"}}},
		{"forged request info", nats.Header{"Nats-Request-Info": {`{"acc":"SQ_T_globex","user":"gw"}`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack, apiErr := publishAs(t, pub, "orders.acme.1", tc.header)
			if apiErr != nil {
				t.Fatalf("refused: %v", apiErr)
			}
			m := e.stored(ack.Sequence)
			if got := m.Header.Get(semaq.HdrTenant); got != "acme" {
				t.Fatalf("stored tenant %q, want acme", got)
			}
			if got := m.Header.Get("Nats-Request-Info"); got != "" {
				t.Fatalf("stored message carries the sender's connection details: %s", got)
			}
		})
	}
	before := e.lastSeq()
	for _, tenant := range []string{"globex", "ACME"} {
		_, apiErr := publishAs(t, pub, "orders.acme.2", nats.Header{semaq.HdrTenant: {tenant}})
		if !errors.Is(apiErr, semaq.ErrForbidden) || !strings.Contains(apiErr.Description, "acme-pub") {
			t.Fatalf("AI-Tenant %s from a publisher of acme: %v, want a refusal naming the user", tenant, apiErr)
		}
	}
	// Another spelling of the header is the same field.
	if _, apiErr := publishAs(t, pub, "orders.acme.2", nats.Header{"ai-tenant": {"globex"}}); !errors.Is(apiErr, semaq.ErrForbidden) {
		t.Fatalf("tenant as ai-tenant: %v, want a refusal", apiErr)
	}
	if after := e.lastSeq(); after != before {
		t.Fatalf("refused messages were stored: last sequence %d → %d", before, after)
	}
	// A publisher without a tenant may not name one.
	if _, apiErr := publishAs(t, e.conn("nobody-pub"), "orders.x", nats.Header{semaq.HdrTenant: {"acme"}}); !errors.Is(apiErr, semaq.ErrForbidden) {
		t.Fatalf("tenant from a user without one: %v, want a refusal", apiErr)
	}
	// A service acts for tenants.
	ack, apiErr := publishAs(t, e.conn("gw"), "orders.globex.1", nats.Header{semaq.HdrTenant: {"globex"}})
	if apiErr != nil {
		t.Fatalf("service for globex: %v", apiErr)
	}
	if got := e.stored(ack.Sequence).Header.Get(semaq.HdrTenant); got != "globex" {
		t.Fatalf("service's message stored for %q, want globex", got)
	}
}

func (e *tenantEnv) lastSeq() uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := e.admin.StreamInfo(ctx, "ORD")
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.LastSeq
}

// A user's core messages reach its own tenant's subscribers and the
// broker, never another tenant's.
func TestTenantsDoNotSeeEachOthersCoreMessages(t *testing.T) {
	e := newTenantEnv(t)
	same, other := e.conn("acme-read"), e.conn("globex-read")
	sameSub, err := same.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	otherGot := watchWithMarker(t, other, "globex-read")
	if err := same.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, apiErr := publishAs(t, e.conn("acme-pub"), "orders.acme.secret", nil); apiErr != nil {
		t.Fatal(apiErr)
	}
	if m, err := sameSub.NextMsg(5 * time.Second); err != nil || m.Subject != "orders.acme.secret" {
		t.Fatalf("same tenant: %v %v, want the message", m, err)
	}
	// The node's own publish after it: whoever gets the marker first
	// would have had the secret before it.
	expectMarkerFirst(t, e.op, "globex-read", otherGot)
}

// watchWithMarker subscribes nc, user name's connection, to orders.> and
// to a marker in its inbox, both into the channel returned: a message
// arrives there in the order the user's node delivered it.
func watchWithMarker(t *testing.T, nc *nats.Conn, name string) chan *nats.Msg {
	t.Helper()
	got := make(chan *nats.Msg, 64)
	for _, subj := range []string{"orders.>", semaq.UserInboxPrefix + name + ".marker"} {
		if _, err := nc.ChanSubscribe(subj, got); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}

// expectMarkerFirst sends the marker to user name's inbox through op, a
// connection of the node's account, and fails the test if anything
// reached got before it.
func expectMarkerFirst(t *testing.T, op *nats.Conn, name string, got chan *nats.Msg) {
	t.Helper()
	marker := semaq.UserInboxPrefix + name + ".marker"
	if err := op.Publish(marker, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Subject != marker {
			t.Fatalf("%s got %s, another tenant's message", name, m.Subject)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never got the marker", name)
	}
}

// The broker runs filtered subscriptions and key-shared groups with its
// own rights: it checks the user's grants, role and inbox itself.
func TestFilterAndKeySharedChecksTheReadersGrants(t *testing.T) {
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	brokertest.AddStream(t, admin, "ORD", "orders.>")
	brokertest.AddStream(t, admin, "PAY", "pay.>")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	keys := map[string]string{}
	for _, u := range []semaq.UserAddRequest{
		{Name: "alice", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.acme.>"}},
		{Name: "ingest", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"orders.acme.>"}},
	} {
		r, err := admin.AddUser(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		keys[u.Name] = r.Key
	}
	if _, err := brokertest.ConnectKey(t, s, keys["ingest"]).Publish(ctx, "orders.acme.1", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	alice := brokertest.ConnectKey(t, s, keys["alice"])
	for _, sub := range []struct {
		name string
		run  func(subject string) (*client.Subscription, error)
	}{
		{"filter", func(subject string) (*client.Subscription, error) {
			return alice.Subscribe(ctx, subject, client.WithFilter("true"))
		}},
		{"key-shared", func(subject string) (*client.Subscription, error) {
			return alice.SubscribeKeyShared(ctx, subject, "g1", client.KeyBy("tenant"))
		}},
	} {
		t.Run(sub.name, func(t *testing.T) {
			got, err := sub.run("orders.acme.>")
			if err != nil {
				t.Fatalf("on its own subjects: %v", err)
			}
			defer got.Close()
			m, err := got.Next(ctx)
			if err != nil || m.Subject != "orders.acme.1" {
				t.Fatalf("reading its own subjects: %v %v", m, err)
			}
			for _, subject := range []string{"orders.>", "orders.globex.>", "pay.>"} {
				if _, err := sub.run(subject); !errors.Is(err, semaq.ErrForbidden) || !strings.Contains(err.Error(), "alice") {
					t.Fatalf("%s outside its grants: %v, want a refusal naming the user", subject, err)
				}
			}
		})
	}
	// A deliver subject outside the user's inbox, asked for by hand.
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("alice", keys["alice"]), nats.CustomInboxPrefix(semaq.UserInboxPrefix+"alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	body, _ := json.Marshal(semaq.FilterStartRequest{Subject: "orders.acme.>", Filter: "true", DeliverSubject: "orders.acme.copy"})
	m, err := nc.Request(semaq.APIFilterStart, body, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Data), "not in its inbox") {
		t.Fatalf("deliver subject outside the inbox: %s", m.Data)
	}
	// A publisher reads nothing, through the broker or not: the NATS
	// server refuses its request, and the SDK says so at once rather
	// than wait out its timeout.
	ingest := brokertest.ConnectKey(t, s, keys["ingest"])
	if _, err := ingest.Subscribe(ctx, "orders.acme.>", client.WithFilter("true")); !errors.Is(err, semaq.ErrForbidden) ||
		!strings.Contains(err.Error(), semaq.APIFilterStart) {
		t.Fatalf("a publisher's filtered subscription: %v, want the server's refusal", err)
	}
}

// A worker's queue globs are checked by the broker on every fetch, so a
// queue created after the worker connected is served without a
// reconnect, and a queue outside the globs is refused with a reason.
func TestWorkerQueueGlobsCheckedByTheBroker(t *testing.T) {
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	keys := map[string]string{}
	for _, u := range []semaq.UserAddRequest{
		{Name: "gpu-7", Role: semaq.RoleWorker, Queues: []string{"INFER_*"}},
		{Name: "ingest", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"jobs.>"}},
	} {
		r, err := admin.AddUser(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		keys[u.Name] = r.Key
	}
	worker := brokertest.ConnectKey(t, s, keys["gpu-7"])
	for _, q := range []semaq.QueueConfig{{Name: "INFER_LATE", Subjects: []string{"jobs.late"}}, {Name: "OTHER", Subjects: []string{"jobs.other"}}} {
		if _, err := admin.AddQueue(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := brokertest.ConnectKey(t, s, keys["ingest"]).Publish(ctx, "jobs.late", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	jobs, err := worker.Fetch(ctx, "INFER_LATE", client.FetchWait(2*time.Second))
	if err != nil || len(jobs) != 1 {
		t.Fatalf("fetch from a queue made after the worker connected: %d jobs, %v", len(jobs), err)
	}
	if got := jobs[0].Header.Get(semaq.HdrTenant); got != "acme" {
		t.Fatalf("job's tenant %q, want the publisher's, acme", got)
	}
	if _, err := worker.Fetch(ctx, "OTHER", client.FetchWait(100*time.Millisecond)); !errors.Is(err, semaq.ErrForbidden) ||
		!strings.Contains(err.Error(), "INFER_*") {
		t.Fatalf("fetch outside the globs: %v, want a refusal naming the globs", err)
	}
}
