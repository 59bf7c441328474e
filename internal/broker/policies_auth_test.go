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

// policyAuthEnv is a node with auth on, a stream on pa.> and users of
// every role, of tenants acme and globex.
type policyAuthEnv struct {
	t     *testing.T
	s     interface{ ClientURL() string }
	admin *client.Client
	op    *nats.Conn
	js    jetstream.JetStream
	keys  map[string]string
}

func newPolicyAuthEnv(t *testing.T) *policyAuthEnv {
	t.Helper()
	s := brokertest.Start(t, brokertest.WithAuth)
	e := &policyAuthEnv{t: t, s: s, admin: brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s)), keys: map[string]string{}}
	op, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	e.op = op
	if e.js, err = jetstream.New(op); err != nil {
		t.Fatal(err)
	}
	brokertest.AddStream(t, e.admin, "PA", "pa.>")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, u := range []semaq.UserAddRequest{
		{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"pa.>"}},
		{Name: "globex-pub", Tenant: "globex", Role: semaq.RolePublisher, Subjects: []string{"pa.>"}},
		{Name: "acme-read", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"pa.>"}},
		{Name: "globex-read", Tenant: "globex", Role: semaq.RoleReader, Subjects: []string{"pa.>"}},
		{Name: "svc", Role: semaq.RoleService, Subjects: []string{"pa.>"}},
		{Name: "gpu", Role: semaq.RoleWorker, Queues: []string{"INFER_*"}},
	} {
		r, err := e.admin.AddUser(ctx, u)
		if err != nil {
			t.Fatalf("add user %s: %v", u.Name, err)
		}
		e.keys[u.Name] = r.Key
	}
	e.keys["admin"] = brokertest.AdminKey(t, s)
	return e
}

// sdk is an SDK client of user name.
func (e *policyAuthEnv) sdk(name string) *client.Client {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, e.s.ClientURL(), client.WithKey(e.keys[name]))
	if err != nil {
		e.t.Fatalf("connect as %s: %v", name, err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// conn is a plain NATS connection of user name; errs gets the errors the
// server sends it (permissions violations).
func (e *policyAuthEnv) conn(name string) (*nats.Conn, <-chan error) {
	e.t.Helper()
	errs := make(chan error, 64)
	nc, err := nats.Connect(e.s.ClientURL(), nats.UserInfo(name, e.keys[name]), nats.CustomInboxPrefix(semaq.UserInboxPrefix+name),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		e.t.Fatalf("connect as %s: %v", name, err)
	}
	e.t.Cleanup(nc.Close)
	return nc, errs
}

// addRule adds r as the admin.
func (e *policyAuthEnv) addRule(ctx context.Context, r semaq.PolicyRule) {
	e.t.Helper()
	if err := apiCall(ctx, e.t, e.admin.Conn(), semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: r}, nil); err != nil {
		e.t.Fatalf("add policy %s: %v", r.Name, err)
	}
}

// stored is message seq of PA.
func (e *policyAuthEnv) stored(ctx context.Context, seq uint64) *jetstream.RawStreamMsg {
	e.t.Helper()
	st, err := e.js.Stream(ctx, "PA")
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		e.t.Fatalf("stored message %d: %v", seq, err)
	}
	return m
}

// wantViolation fails unless the server refuses nc's last publish on subj
// with a permissions violation (the client hands it to its error handler
// on a goroutine of its own, some time after the server sent it).
func wantViolation(t *testing.T, who string, errs <-chan error, subj string) {
	t.Helper()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), subj) {
			t.Fatalf("%s on %s: %v, want a permissions violation", who, subj, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s published on %s and the server did not refuse it", who, subj)
	}
}

// Only admins manage rules and plugins: every other role's request is
// refused by the NATS server and never answered.
func TestPolicyAuthAdminOnly(t *testing.T) {
	t.Parallel()
	e := newPolicyAuthEnv(t)
	rule, _ := json.Marshal(semaq.PolicyAddRequest{PolicyRule: semaq.PolicyRule{Name: "sneaky", Subjects: []string{"pa.>"}, Redact: []string{semaq.PIIEmail}}})
	for _, who := range []string{"acme-pub", "acme-read", "svc", "gpu"} {
		nc, errs := e.conn(who)
		for _, subj := range []string{semaq.APIPolicyAdd, semaq.APIPolicyList, semaq.APIPolicyTest, semaq.APIPolicyDelete, semaq.APIPluginAdd} {
			if _, err := nc.Request(subj, rule, 300*time.Millisecond); err == nil {
				t.Fatalf("%s asked %s and was answered", who, subj)
			}
			wantViolation(t, who, errs, subj)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var list semaq.PolicyListResponse
	if err := apiCall(ctx, t, e.admin.Conn(), semaq.APIPolicyList, struct{}{}, &list); err != nil || len(list.Policies) != 0 {
		t.Fatalf("the admin lists %+v (%v); no refused add may have stored a rule", list.Policies, err)
	}
}

// A rule of one tenant acts on that tenant's messages and token streams
// only.
func TestPolicyAuthTenantRules(t *testing.T) {
	t.Parallel()
	e := newPolicyAuthEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.addRule(ctx, semaq.PolicyRule{Name: "acme-mask", Tenant: "acme", Subjects: []string{"pa.mask.>"}, Redact: []string{semaq.PIIEmail}})
	e.addRule(ctx, semaq.PolicyRule{Name: "acme-tokens", Tenant: "acme", Streams: []string{semaq.PolicyStreamTokens}, Redact: []string{semaq.PIIEmail}})

	const payload = `{"q":"ann@example.com"}`
	for who, want := range map[string]string{"acme-pub": `{"q":"[EMAIL]"}`, "globex-pub": payload} {
		ack, err := e.sdk(who).Publish(ctx, "pa.mask.in", []byte(payload))
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if got := string(e.stored(ctx, ack.Sequence).Data); got != want {
			t.Fatalf("%s's message stored as %s, want %s", who, got, want)
		}
	}

	// A worker writes a stream for each tenant (it may name any).
	gpu, _ := e.conn("gpu")
	for _, tenant := range []string{"acme", "globex"} {
		id := "pa-" + tenant
		for i, text := range []string{"mail ann@exa", "mple.com", ""} {
			m := &nats.Msg{Subject: semaq.TokenWritePrefix + id + ".c", Header: nats.Header{
				semaq.HdrTokenKey: {"tenant-writer-key-0123456789"}, semaq.HdrTenant: {tenant}},
				Data: semaq.AppendTokenChunk(nil, &semaq.TokenChunk{Seq: uint64(i + 1), Offset: uint64(i), N: 1, Text: text})}
			if text == "" {
				m.Subject = semaq.TokenWritePrefix + id + ".end"
				m.Data = semaq.AppendTokenChunk(nil, &semaq.TokenChunk{Seq: uint64(i + 1), Offset: uint64(i), Final: &semaq.TokenFinal{FinishReason: "stop"}})
			}
			r, err := gpu.RequestMsgWithContext(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if err := replyError(r); err != nil {
				t.Fatalf("%s record %d: %v", id, i, err)
			}
		}
		want := map[string]string{"acme": "mail [EMAIL]", "globex": "mail ann@example.com"}[tenant]
		if res := collectTokens(ctx, t, e.admin, id, client.ForTenant(tenant)); res.Text != want {
			t.Fatalf("%s's stream reads %q, want %q", tenant, res.Text, want)
		}
	}
}

// Tokenized values go back to the tenant that sent them, and to no one
// else: another tenant's user finds nothing, naming the tenant is refused,
// a worker may not ask.
func TestPolicyAuthVaultTenancy(t *testing.T) {
	t.Parallel()
	e := newPolicyAuthEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.addRule(ctx, semaq.PolicyRule{Name: "tok", Subjects: []string{"pa.tok.>"}, Redact: []string{semaq.PIIEmail}, Action: semaq.PIITokenize})
	const value = "ann@example.com"
	ack, err := e.sdk("acme-pub").Publish(ctx, "pa.tok.in", []byte(`{"q":"`+value+`"}`), client.WithMsgID("v-1"))
	if err != nil {
		t.Fatal(err)
	}
	if m := e.stored(ctx, ack.Sequence); string(m.Data) != `{"q":"<EMAIL_1>"}` || m.Header.Get(semaq.HdrPIIScope) != "r.v-1" {
		t.Fatalf("stored %s, scope %q", m.Data, m.Header.Get(semaq.HdrPIIScope))
	}
	req := semaq.PolicyRestoreRequest{Scope: "r.v-1", Text: "to <EMAIL_1>"}
	for _, tc := range []struct {
		who, tenant string
		want        error
	}{
		{"globex-pub", "", semaq.ErrVaultNotFound},
		{"globex-read", "", semaq.ErrVaultNotFound},
		{"globex-pub", "acme", semaq.ErrForbidden},
		{"gpu", "", semaq.ErrForbidden},
		{"gpu", "acme", semaq.ErrForbidden},
	} {
		r := req
		r.Tenant = tc.tenant
		res, err := e.sdk(tc.who).RestorePII(ctx, r)
		if !errors.Is(err, tc.want) || res != nil {
			t.Fatalf("%s restoring (tenant %q): %+v, %v; want %v", tc.who, tc.tenant, res, err, tc.want)
		}
		if strings.Contains(err.Error(), value) {
			t.Fatalf("%s's refusal holds the value: %v", tc.who, err)
		}
	}
	res, err := e.sdk("acme-read").RestorePII(ctx, req)
	if err != nil || res.Text != "to "+value {
		t.Fatalf("acme's reader: %+v, %v", res, err)
	}
}

// A tenant's users see their own tenant's policy events only, and no
// client, not even an admin, may send one.
func TestPolicyAuthEvents(t *testing.T) {
	t.Parallel()
	e := newPolicyAuthEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.addRule(ctx, semaq.PolicyRule{Name: "wombat", Subjects: []string{"pa.flag.>"}, Words: []string{"wombat"}, OnMatch: semaq.ContentFlag})
	subs := map[string]*nats.Subscription{}
	for _, who := range []string{"acme-read", "globex-read"} {
		nc, _ := e.conn(who)
		sub, err := nc.SubscribeSync(semaq.PolicyEventFilter(strings.TrimSuffix(who, "-read")))
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		subs[who] = sub
	}
	flag := func(who string) {
		t.Helper()
		if _, err := e.sdk(who).Publish(ctx, "pa.flag.in", []byte(`{"q":"a wombat"}`)); err != nil {
			t.Fatal(err)
		}
	}
	// The node sends the events in this order on one connection, so each
	// reader's first event shows whether the other tenant's came before.
	flag("globex-pub")
	flag("acme-pub")
	flag("globex-pub")
	for who, want := range map[string][]string{"acme-read": {"acme"}, "globex-read": {"globex", "globex"}} {
		for _, tenant := range want {
			m, err := subs[who].NextMsg(10 * time.Second)
			if err != nil {
				t.Fatalf("%s: %v", who, err)
			}
			var ev semaq.PolicyEvent
			if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Kind != "flag" || ev.Tenant != tenant || ev.Policy != "wombat" {
				t.Fatalf("%s got %s on %s, want a flag of tenant %s", who, m.Data, m.Subject, tenant)
			}
		}
	}

	for _, who := range []string{"admin", "acme-pub", "acme-read", "svc", "gpu"} {
		nc, errs := e.conn(who)
		subj := semaq.PolicyEventSubject("acme", "wombat")
		if err := nc.Publish(subj, []byte(`{"kind":"flag","tenant":"acme","policy":"wombat","node":"forged"}`)); err != nil {
			t.Fatal(err)
		}
		wantViolation(t, who, errs, subj)
	}
}

// A hostile publisher cannot get a blocked value past the rule by writing
// it in another form, nor choose the vault scope its values go to; a
// refusal never repeats the value.
func TestPolicyAuthHostilePublisher(t *testing.T) {
	t.Parallel()
	e := newPolicyAuthEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.addRule(ctx, semaq.PolicyRule{Name: "no-mail", Subjects: []string{"pa.block.>"}, Redact: []string{semaq.PIIEmail}, Action: semaq.PIIBlock})
	e.addRule(ctx, semaq.PolicyRule{Name: "tok", Subjects: []string{"pa.tok.>"}, Redact: []string{semaq.PIIEmail}, Action: semaq.PIITokenize})
	pub := e.sdk("acme-pub")

	for _, payload := range []string{
		`{"q":"\u0061nn@example.com"}`,                  // an escape in the value
		`{"q":"ann\u0040example\u002ecom"}`,             // the punctuation escaped
		`{"\u0071":"ann@exa\u006dple.com"}`,             // the key escaped too
		`{"q":"fine","q":"ann@example.com"}`,            // a duplicate key
		`{"a":[{"b":[1,{"c":"ann@example.com"}]}]}`,     // deep in arrays
		`{"q":"fine"} ann@example.com`,                  // JSON, then text
		"ann@example.com",                               // no JSON at all
		`{"q":"mail ann@example.com\u0000 with a NUL"}`, // a NUL after it
	} {
		_, err := pub.Publish(ctx, "pa.block.in", []byte(payload))
		if !errors.Is(err, semaq.ErrPIIBlocked) {
			t.Fatalf("%s: %v, want ErrPIIBlocked", payload, err)
		}
		if msg := err.Error(); strings.Contains(msg, "ann") || strings.Contains(msg, "example") {
			t.Fatalf("%s: the refusal repeats the value: %v", payload, err)
		}
	}
	// Each string is judged alone: pieces of an address under two keys are
	// no address (and nothing that reads them one by one finds one).
	if _, err := pub.Publish(ctx, "pa.block.in", []byte(`{"user":"ann","domain":"example.com"}`)); err != nil {
		t.Fatalf("an address split over two keys: %v", err)
	}

	// The scope is the broker's: a publisher's own AI-PII-Scope names
	// neither where its values go nor where a reader finds them.
	for _, tc := range []struct{ id, data, want string }{
		{"", `{"q":"ann@example.com"}`, "m."},
		{"h-2", `{"q":"ann@example.com"}`, "r.h-2"},
		{"", `{"q":"nothing to hide"}`, ""},
	} {
		m := nats.NewMsg("pa.tok.in")
		m.Data = []byte(tc.data)
		m.Header.Set(semaq.HdrPIIScope, "r.victim")
		if tc.id != "" {
			m.Header.Set(semaq.HdrMsgID, tc.id)
		}
		ack, err := pub.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("%s: %v", tc.data, err)
		}
		got := e.stored(ctx, ack.Sequence).Header.Get(semaq.HdrPIIScope)
		if tc.want == "" && got != "" || tc.want != "" && (got == tc.want+"victim" || !strings.HasPrefix(got, tc.want)) || tc.want == "m." && len(got) < 10 {
			t.Fatalf("%s with id %q and a forged scope: stored scope %q, want %q…", tc.data, tc.id, got, tc.want)
		}
	}
	if _, err := e.sdk("acme-read").RestorePII(ctx, semaq.PolicyRestoreRequest{Scope: "r.victim", Text: "<EMAIL_1>"}); !errors.Is(err, semaq.ErrVaultNotFound) {
		t.Fatalf("the forged scope holds values: %v", err)
	}
}
