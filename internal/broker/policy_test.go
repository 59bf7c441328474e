package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/policy"
	"github.com/semaq/semaq/semaq"
)

// testSteps is a registry of the policy steps these tests enable by name,
// as `semaq serve` enables the default registry's from its configuration.
type testSteps struct {
	reg *policy.Registry
	// dry counts the dry runs the redact step saw (policy.DryRun).
	dry atomic.Int64
}

func newTestSteps(t *testing.T) *testSteps {
	t.Helper()
	ts := &testSteps{reg: policy.NewRegistry()}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// test-refuse refuses a payload holding SECRET with a plain error:
	// the publisher gets ErrPolicy naming the step.
	must(ts.reg.Register(policy.Spec{Name: "test-refuse", Summary: "refuses SECRET"}, func(json.RawMessage) (policy.Step, error) {
		return stepFunc(func(_ context.Context, m *policy.Message) (policy.Verdict, error) {
			if bytes.Contains(m.Data, []byte("SECRET")) {
				return policy.Pass, errors.New("the payload holds a secret")
			}
			return policy.Pass, nil
		}), nil
	}))
	// test-redact masks card numbers with its settings' mask, records
	// the tenant it saw, upgrades {"legacy":…} to {"q":…} and breaks
	// BREAK; all with Rewrite.
	must(ts.reg.Register(policy.Spec{Name: "test-redact", Summary: "masks cards"}, func(settings json.RawMessage) (policy.Step, error) {
		var cfg struct {
			Mask string `json:"mask"`
		}
		if err := json.Unmarshal(settings, &cfg); err != nil || cfg.Mask == "" {
			return nil, fmt.Errorf("settings need a mask (%v)", err)
		}
		return stepFunc(func(ctx context.Context, m *policy.Message) (policy.Verdict, error) {
			if policy.DryRun(ctx) {
				ts.dry.Add(1)
			}
			m.Header.Set("Policy-Tenant", m.Envelope.Tenant)
			m.Header.Set("Policy-Principal", m.Principal.Kind+"/"+m.Principal.User+"/"+m.Stream)
			switch {
			case bytes.HasPrefix(m.Data, []byte(`{"legacy":`)):
				m.Data = append([]byte(`{"q":`), m.Data[len(`{"legacy":`):]...)
			case bytes.Contains(m.Data, []byte("BREAK")):
				m.Data = []byte(`{"broken":true}`)
			default:
				m.Data = bytes.ReplaceAll(m.Data, []byte("4111-1111"), []byte(cfg.Mask))
			}
			return policy.Rewrite, nil
		}), nil
	}))
	// test-liar changes a payload holding LIE and says it passed.
	must(ts.reg.Register(policy.Spec{Name: "test-liar"}, func(json.RawMessage) (policy.Step, error) {
		return stepFunc(func(_ context.Context, m *policy.Message) (policy.Verdict, error) {
			if bytes.Contains(m.Data, []byte("LIE")) {
				m.Data = []byte(`{"q":"truth"}`)
			}
			return policy.Pass, nil
		}), nil
	}))
	// test-tenant moves a message to tenant other: a store user's
	// stamped tenant is the broker's word, which no step may change.
	must(ts.reg.Register(policy.Spec{Name: "test-tenant"}, func(json.RawMessage) (policy.Step, error) {
		return stepFunc(func(_ context.Context, m *policy.Message) (policy.Verdict, error) {
			if bytes.Contains(m.Data, []byte("MOVE")) {
				m.Header.Set(semaq.HdrTenant, "other")
				return policy.Rewrite, nil
			}
			return policy.Pass, nil
		}), nil
	}))
	return ts
}

// stepFunc is a policy step of one function; the registry names it.
type stepFunc func(ctx context.Context, m *policy.Message) (policy.Verdict, error)

func (f stepFunc) Name() string { return "" }
func (f stepFunc) Apply(ctx context.Context, m *policy.Message) (policy.Verdict, error) {
	return f(ctx, m)
}

// policyConfig enables the test steps in order.
func policyConfig(cfg *broker.Config) {
	cfg.Policy = []broker.PolicyConfig{
		{Name: "test-refuse"},
		{Name: "test-liar"},
		{Name: "test-tenant"},
		{Name: "test-redact", Settings: map[string]any{"mask": "[card]"}},
	}
}

// policyFixture is a stream AI (ai.>) whose payloads must have a string q,
// and a route sending a masked card on ai.in to ai.clean.
func policyFixture(t *testing.T, c *client.Client) {
	t.Helper()
	ctx := ctxT(t)
	brokertest.AddStream(t, c, "AI", "ai.>")
	if _, _, err := c.RegisterSchema(ctx, "ai-req", `{"type":"object","required":["q"],"properties":{"q":{"type":"string"}}}`); err != nil {
		t.Fatal(err)
	}
	if err := c.BindSchema(ctx, "ai.>", "ai-req"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddRoute(ctx, semaq.Route{Name: "redacted", Subject: "ai.in", When: `payload.q == "[card] please"`, To: "ai.clean"}); err != nil {
		t.Fatal(err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stored reads the message an ack points at, below the semantic layer.
func stored(t *testing.T, s *broker.Server, ack *semaq.PubAck) *jetstream.RawStreamMsg {
	t.Helper()
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctxT(t), ack.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctxT(t), ack.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPolicyStepsFromConfig enables the policy steps by name from the
// node's configuration. They run after the envelope and before the
// schema, in order: one refuses (its error reaches the publisher as
// ErrPolicy naming it), one rewrites (the schema validates what it left,
// the route sees it, it is what is stored), a step that changes a payload
// but answers pass is refused. The route dry run runs the same steps.
func TestPolicyStepsFromConfig(t *testing.T) {
	ts := newTestSteps(t)
	s := brokertest.StartWith(t, []broker.Option{broker.WithPolicyRegistry(ts.reg)}, policyConfig)
	c := brokertest.Connect(t, s)
	policyFixture(t, c)
	ctx := ctxT(t)

	_, err := c.Publish(ctx, "ai.in", []byte(`{"q":"SECRET"}`))
	if !errors.Is(err, semaq.ErrPolicy) || !strings.Contains(err.Error(), "policy test-refuse refused the message on ai.in: the payload holds a secret") {
		t.Fatalf("refused publish: err = %v", err)
	}
	if _, err := c.Publish(ctx, "ai.in", []byte(`{"q":"LIE"}`)); !errors.Is(err, semaq.ErrPolicy) || !strings.Contains(err.Error(), "answered pass") {
		t.Fatalf("a step that changed the payload and answered pass: err = %v", err)
	}
	// Rewritten, then validated: a rewrite the schema refuses is refused,
	// a payload the step makes valid is taken.
	if _, err := c.Publish(ctx, "ai.in", []byte(`{"q":"BREAK"}`)); !errors.Is(err, semaq.ErrSchema) {
		t.Fatalf("a rewrite the schema refuses: err = %v", err)
	}
	ack, err := c.Publish(ctx, "ai.in", []byte(`{"legacy":"old"}`))
	if err != nil {
		t.Fatalf("a payload the policy upgrades: %v", err)
	}
	if m := stored(t, s, ack); string(m.Data) != `{"q":"old"}` {
		t.Fatalf("stored %s", m.Data)
	}
	// The route matches on the rewritten payload, which is stored.
	ack, err = c.Publish(ctx, "ai.in", []byte(`{"q":"4111-1111 please"}`), client.WithTenant("acme"))
	if err != nil {
		t.Fatal(err)
	}
	m := stored(t, s, ack)
	if string(m.Data) != `{"q":"[card] please"}` || m.Subject != "ai.clean" || m.Header.Get("Policy-Tenant") != "acme" ||
		m.Header.Get("Policy-Principal") != "anonymous//AI" {
		t.Fatalf("stored %s on %s with headers %v", m.Data, m.Subject, m.Header)
	}

	// The dry run: the same steps, the same decision, nothing stored.
	before := ts.dry.Load()
	res, err := c.TestRoute(ctx, "ai.in", []byte(`{"q":"4111-1111 please"}`), client.WithTenant("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Refused != "" || res.Route != "redacted" || res.Target != "ai.clean" || res.Stream != "AI" ||
		string(res.Data) != `{"q":"[card] please"}` || first(res.Headers["Policy-Tenant"]) != "acme" {
		t.Fatalf("dry run: %+v", res)
	}
	if ts.dry.Load() != before+1 {
		t.Fatalf("the step saw %d dry runs, want 1", ts.dry.Load()-before)
	}
	res, err = c.TestRoute(ctx, "ai.in", []byte(`{"q":"SECRET"}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.RefusedBy != "policy" || !strings.Contains(res.Refused, "policy test-refuse refused") || len(res.Trials) != 0 {
		t.Fatalf("dry run of a refused message: %+v", res)
	}
	res, err = c.TestRoute(ctx, "ai.in", []byte(`{"q":"BREAK"}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.RefusedBy != "schema" {
		t.Fatalf("dry run of a rewrite the schema refuses: %+v", res)
	}

	// Counted by step and verdict; the dry runs are not.
	for _, want := range []struct {
		step, verdict string
		n             float64
	}{
		{"test-refuse", "refuse", 1}, {"test-liar", "refuse", 1}, {"test-redact", "rewrite", 3},
	} {
		if got := policyCounter(t, s.Metrics().Registry(), "semaq_policy_verdicts_total", map[string]string{"step": want.step, "verdict": want.verdict}); got != want.n {
			t.Errorf("%s %s: %v, want %v", want.step, want.verdict, got, want.n)
		}
	}
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// policyCounter reads one labelled counter of reg.
func policyCounter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// A configuration naming a step no registry has is refused before the
// node starts, naming what is registered.
func TestPolicyStepNotRegisteredRefused(t *testing.T) {
	ts := newTestSteps(t)
	for _, tc := range []struct {
		steps []broker.PolicyConfig
		want  string
	}{
		{[]broker.PolicyConfig{{Name: "redact-pii"}}, `policy step "redact-pii" is not registered; registered: test-liar, test-redact, test-refuse, test-tenant`},
		{[]broker.PolicyConfig{{Name: "test-redact"}}, "policy step test-redact: settings need a mask"},
		{[]broker.PolicyConfig{{Name: "Bad Name"}}, `policy[0]: policy step name "Bad Name"`},
	} {
		cfg := broker.DefaultConfig()
		cfg.DataDir, cfg.Listen, cfg.HTTP = t.TempDir(), "127.0.0.1:0", ""
		cfg.Policy = tc.steps
		_, err := broker.New(cfg, nil, broker.WithPolicyRegistry(ts.reg))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.steps, err, tc.want)
		}
	}
}

// With auth on, the hot path and the dry run apply the same steps for the
// same sender: a store user's tenant is stamped before the policy sees the
// message and before the route judges it, a tenant the user may not name
// is refused by both, and a step may not move the message to another
// tenant.
func TestPolicyAndTenantStampInPublishAndDryRun(t *testing.T) {
	ts := newTestSteps(t)
	s := brokertest.StartWith(t, []broker.Option{broker.WithPolicyRegistry(ts.reg)}, brokertest.WithAuth, policyConfig)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx := ctxT(t)
	policyFixture(t, admin)
	if _, err := admin.AddRoute(ctx, semaq.Route{Name: "acme", Subject: "ai.in", When: `tenant == "acme"`, To: "ai.acme", Order: -1}); err != nil {
		t.Fatal(err)
	}
	added, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "alice", Role: semaq.RolePublisher, Tenant: "acme", Subjects: []string{"ai.>"}})
	if err != nil {
		t.Fatal(err)
	}
	alice := brokertest.ConnectKey(t, s, added.Key)

	ack, err := alice.Publish(ctx, "ai.in", []byte(`{"q":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	m := stored(t, s, ack)
	if m.Subject != "ai.acme" || m.Header.Get(semaq.HdrTenant) != "acme" || m.Header.Get("Policy-Tenant") != "acme" ||
		m.Header.Get("Policy-Principal") != "user/alice/AI" {
		t.Fatalf("alice's message stored on %s with headers %v", m.Subject, m.Header)
	}
	res, err := admin.TestRouteAs(ctx, "alice", "ai.in", []byte(`{"q":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Refused != "" || res.Target != "ai.acme" || res.Route != "acme" || first(res.Headers[semaq.HdrTenant]) != "acme" ||
		first(res.Headers["Policy-Tenant"]) != "acme" || first(res.Headers["Policy-Principal"]) != "user/alice/AI" {
		t.Fatalf("dry run as alice: %+v", res)
	}

	// Another tenant: refused alike, by the envelope step.
	_, pubErr := alice.Publish(ctx, "ai.in", []byte(`{"q":"hello"}`), client.WithTenant("globex"))
	res, err = admin.TestRouteAs(ctx, "alice", "ai.in", []byte(`{"q":"hello"}`), client.WithTenant("globex"))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(pubErr, semaq.ErrForbidden) || res.RefusedBy != "envelope" || res.Refused != pubErr.Error() {
		t.Fatalf("publish for another tenant: %v; dry run: %+v", pubErr, res)
	}
	// A step moving the message to another tenant: refused alike.
	_, pubErr = alice.Publish(ctx, "ai.in", []byte(`{"q":"MOVE"}`))
	res, err = admin.TestRouteAs(ctx, "alice", "ai.in", []byte(`{"q":"MOVE"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(pubErr, semaq.ErrPolicy) || !strings.Contains(pubErr.Error(), "policy test-tenant changed AI-Tenant") ||
		res.RefusedBy != "policy" || res.Refused != pubErr.Error() {
		t.Fatalf("a step moving alice's message: %v; dry run: %+v", pubErr, res)
	}
	// As a user who does not exist: the request is refused, not the message.
	if _, err := admin.TestRouteAs(ctx, "mallory", "ai.in", []byte(`{"q":"hello"}`)); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("as an unknown user: err = %v", err)
	}
}

var clusterRedact sync.Once

// On a cluster every node runs the configured steps on what its ingress
// takes, and answers dry runs with them.
func TestClusterPolicySteps(t *testing.T) {
	// The cluster's nodes are made by brokertest from their configuration
	// alone: the step is in the default registry, as a program embedding
	// the node registers its own.
	clusterRedact.Do(func() {
		ts := newTestSteps(t)
		if err := policy.Register(policy.Spec{Name: "test-cluster-redact"}, func(settings json.RawMessage) (policy.Step, error) {
			return ts.reg.New("test-redact", settings)
		}); err != nil {
			t.Fatal(err)
		}
	})
	cl := brokertest.StartCluster(t, 3, func(cfg *broker.Config) {
		cfg.Policy = []broker.PolicyConfig{{Name: "test-cluster-redact", Settings: map[string]any{"mask": "[card]"}}}
	})
	c := brokertest.Connect(t, cl.Node(0))
	ctx := ctxT(t)
	brokertest.AddStream(t, c, "PAY", "pay.>")
	for i, n := range cl.Nodes() {
		nc := brokertest.Connect(t, n)
		ack, err := nc.Publish(ctx, "pay.in", []byte(fmt.Sprintf(`{"card":"4111-1111","n":%d}`, i)))
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if m := stored(t, n, ack); string(m.Data) != fmt.Sprintf(`{"card":"[card]","n":%d}`, i) {
			t.Fatalf("node %d stored %s", i, m.Data)
		}
		res, err := nc.TestRoute(ctx, "pay.in", []byte(`{"card":"4111-1111"}`))
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Data) != `{"card":"[card]"}` || res.Stream != "PAY" {
			t.Fatalf("node %d dry run: %+v", i, res)
		}
	}
}
