package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// startQuotaNode runs a node (with its HTTP door) whose quotas read clk.
func startQuotaNode(t *testing.T, clk *brokertest.StepClock, cfgFn func(*broker.Config), opts ...broker.Option) *broker.Server {
	t.Helper()
	return brokertest.StartWith(t, append(opts, broker.WithQuotaClock(clk.Now)), cfgFn)
}

// quotaRefusal asserts err is a quota's overloaded refusal of kind whose
// description says each of says, and returns it.
func quotaRefusal(t *testing.T, err error, kind string, says ...string) *semaq.APIError {
	t.Helper()
	e, ok := errors.AsType[*semaq.APIError](err)
	if !ok || !errors.Is(err, semaq.ErrOverloaded) || e.Quota != kind {
		t.Fatalf("err = %v (%#v), want an overloaded refusal by quota %s", err, e, kind)
	}
	for _, s := range says {
		if !strings.Contains(e.Description, s) {
			t.Errorf("%q does not say %q", e.Description, s)
		}
	}
	return e
}

// TestQuotaTenantRPM: a tenant over its requests per minute is refused
// with the overloaded error, naming the quota, the tenant and when to
// retry, and nothing is stored; another tenant passes meanwhile; the
// refusals are counted; after the Retry-After the tenant passes again.
func TestQuotaTenantRPM(t *testing.T) {
	clk := brokertest.NewStepClock()
	s := startQuotaNode(t, clk, func(c *broker.Config) {
		c.Quotas = quota.Config{Tenants: map[string]quota.Limits{"acme": {RPM: 2}}}
	})
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	brokertest.AddStream(t, c, "EV", "ev.>")

	for i := range 2 {
		publish(t, c, "ev.a", fmt.Sprint(i), client.WithTenant("acme"))
	}
	_, err := c.Publish(ctx, "ev.a", []byte("third"), client.WithTenant("acme"))
	e := quotaRefusal(t, err, "rpm", "quota: tenant acme is over its quota of 2 requests per minute (rpm)", "retry after 30s")
	if e.Code != 429 || e.ErrCode != semaq.ErrCodeOverloaded || e.RetryAfterMs != 30000 {
		t.Fatalf("code %d err_code %d retry %d ms, want 429, %d, 30000", e.Code, e.ErrCode, e.RetryAfterMs, semaq.ErrCodeOverloaded)
	}
	// Another tenant, and messages without a tenant, have no quota.
	publish(t, c, "ev.b", "beta", client.WithTenant("beta"))
	publish(t, c, "ev.b", "none")
	if info, err := c.StreamInfo(ctx, "EV"); err != nil || info.State.Messages != 4 {
		t.Fatalf("stream holds %+v (%v), want the 4 admitted messages and not the refused one", info, err)
	}

	// Over HTTP: 429, Retry-After, the same error code.
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr()+"/api/v1/publish/ev.a", strings.NewReader("h"))
	req.Header.Set("AI-Tenant", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "30" ||
		!strings.Contains(body, fmt.Sprintf(`"err_code":%d`, semaq.ErrCodeOverloaded)) || !strings.Contains(body, "tenant acme") {
		t.Fatalf("HTTP publish over quota: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}

	waitMetrics(t, s,
		`semaq_quota_refusals_total{quota="rpm",scope="tenant",tenant="acme"} 2`,
		`semaq_ingress_rejected_total{reason="quota",subject="ev.>"} 2`,
	)

	// Past the Retry-After, one more (the refill of 30 s), not two.
	clk.Add(30 * time.Second)
	publish(t, c, "ev.a", "later", client.WithTenant("acme"))
	_, err = c.Publish(ctx, "ev.a", []byte("again"), client.WithTenant("acme"))
	quotaRefusal(t, err, "rpm")
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestQuotaTokens: tokens per minute count AI-Prompt-Tokens, or the
// payload's estimate (4 bytes a token) when a message declares none; the
// default applies to each tenant on its own; max_queued_tokens refuses a
// request to a work queue while the tenant's requests waiting there would
// pass it, and only then.
func TestQuotaTokens(t *testing.T) {
	clk := brokertest.NewStepClock()
	s := startQuotaNode(t, clk, func(c *broker.Config) {
		c.Quotas = quota.Config{
			Default: quota.Limits{TPM: 1000},
			Tenants: map[string]quota.Limits{"q": {MaxQueuedTokens: 1000}},
		}
	})
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	brokertest.AddStream(t, c, "EV", "ev.>")

	publish(t, c, "ev.a", "x", client.WithTenant("acme"), client.WithPromptTokens(600))
	_, err := c.Publish(ctx, "ev.a", []byte("x"), client.WithTenant("acme"), client.WithPromptTokens(600))
	e := quotaRefusal(t, err, "tpm", "tenant acme is over its quota of 1000 tokens per minute (tpm): this request has 600 prompt tokens")
	if e.RetryAfterMs != 12000 {
		t.Fatalf("retry after %d ms, want 12000 (200 tokens short at 1000 a minute)", e.RetryAfterMs)
	}
	// 1604 bytes without AI-Prompt-Tokens count 401 tokens: over too.
	_, err = c.Publish(ctx, "ev.a", make([]byte, 1604), client.WithTenant("acme"))
	quotaRefusal(t, err, "tpm", "this request has 401 prompt tokens")
	publish(t, c, "ev.a", string(make([]byte, 1600)), client.WithTenant("acme")) // 400: fits exactly
	// Another tenant under the default has its own minute.
	publish(t, c, "ev.a", "x", client.WithTenant("beta"), client.WithPromptTokens(1000))

	// Tenant q: a work queue without workers keeps what it is given.
	if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "WQ", Subjects: []string{"wq.>"}, Storage: "memory"}); err != nil {
		t.Fatal(err)
	}
	publish(t, c, "wq.a", "x", client.WithTenant("q"), client.WithPromptTokens(800))
	waitUntil(t, func() bool { return broker.TenantQueued(s, "q") == 800 })
	_, err = c.Publish(ctx, "wq.a", []byte("x"), client.WithTenant("q"), client.WithPromptTokens(300))
	quotaRefusal(t, err, "max_queued_tokens", "tenant q is over its quota of 1000 queued prompt tokens (max_queued_tokens): 800 queued and 300 more asked")
	publish(t, c, "wq.a", "x", client.WithTenant("q"), client.WithPromptTokens(200))
	// Not a work queue: queued tokens do not apply.
	publish(t, c, "ev.a", "x", client.WithTenant("q"), client.WithPromptTokens(900))
	// Another tenant's queued tokens are its own.
	publish(t, c, "wq.a", "x", client.WithTenant("other"), client.WithPromptTokens(900))
}

// TestQuotaRefundedWhenTheQueueRefuses: a request the work queue's own
// admission control refuses is not stored, and costs no quota.
func TestQuotaRefundedWhenTheQueueRefuses(t *testing.T) {
	clk := brokertest.NewStepClock()
	s := startQuotaNode(t, clk, func(c *broker.Config) {
		c.Quotas = quota.Config{Tenants: map[string]quota.Limits{"acme": {RPM: 2}}}
	})
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "WQ", Subjects: []string{"wq.>"}, Storage: "memory", MaxMessages: 1}); err != nil {
		t.Fatal(err)
	}
	publish(t, c, "wq.a", "x", client.WithTenant("acme"))
	for range 5 {
		_, err := c.Publish(ctx, "wq.a", []byte("x"), client.WithTenant("acme"))
		if e, _ := errors.AsType[*semaq.APIError](err); e == nil || !errors.Is(err, semaq.ErrOverloaded) || e.Quota != "" {
			t.Fatalf("err = %v, want the queue's own refusal", err)
		}
	}
	if err := c.DeleteQueue(ctx, "WQ"); err != nil {
		t.Fatal(err)
	}
	brokertest.AddStream(t, c, "EV", "wq.>")
	// The five refusals charged nothing: acme has one request left.
	publish(t, c, "wq.a", "x", client.WithTenant("acme"))
	_, err := c.Publish(ctx, "wq.a", []byte("x"), client.WithTenant("acme"))
	quotaRefusal(t, err, "rpm")
}

// TestQuotaOffByDefault: with no quota configured the ingress has no
// limiter: a tenant's flood passes as before.
func TestQuotaOffByDefault(t *testing.T) {
	s := brokertest.Start(t)
	if broker.QuotaOn(s) {
		t.Fatal("quotas checked with none configured")
	}
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "EV", "ev.>")
	for i := range 300 {
		publish(t, c, "ev.a", fmt.Sprint(i), client.WithTenant("acme"), client.WithPromptTokens(1_000_000))
	}
}

// TestQuotaPerUser: with auth on, a user's own quota (semaq user add
// --rpm/--tpm) applies on top of its tenant's, both must allow; the
// tenant's quota counts every user of the tenant, whatever AI-Tenant they
// send (it is stamped from their identity); a user without a quota of its
// own is limited by its tenant's only; a quota changed or given to a user
// added after start applies at once.
func TestQuotaPerUser(t *testing.T) {
	clk := brokertest.NewStepClock()
	s := startQuotaNode(t, clk, func(c *broker.Config) {
		c.Auth = true
		c.Quotas = quota.Config{Tenants: map[string]quota.Limits{"acme": {RPM: 4}}}
	})
	admin := brokertest.ConnectKey(t, s, adminKey(t, s))
	ctx := context.Background()
	brokertest.AddStream(t, admin, "EV", "ev.>")
	user := func(r semaq.UserAddRequest) *client.Client {
		t.Helper()
		r.Role, r.Subjects = semaq.RolePublisher, []string{"ev.>"}
		resp, err := admin.AddUser(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return brokertest.ConnectKey(t, s, resp.Key)
	}
	alice := user(semaq.UserAddRequest{Name: "alice", Tenant: "acme", RPM: 1})
	bob := user(semaq.UserAddRequest{Name: "bob", Tenant: "acme"})

	publish(t, alice, "ev.a", "1")
	_, err := alice.Publish(ctx, "ev.a", []byte("2"))
	quotaRefusal(t, err, "rpm", "quota: user alice (tenant acme) is over its quota of 1 request per minute (rpm)", "retry after 1m0s")
	// bob has no quota of his own: the tenant's 3 left are his, with or
	// without AI-Tenant.
	publish(t, bob, "ev.a", "1")
	publish(t, bob, "ev.a", "2", client.WithTenant("acme"))
	publish(t, bob, "ev.a", "3")
	_, err = bob.Publish(ctx, "ev.a", []byte("4"))
	quotaRefusal(t, err, "rpm", "tenant acme is over its quota of 4 requests per minute")

	// A minute on: the tenant has 4 again, alice 1 of them.
	clk.Add(time.Minute)
	publish(t, alice, "ev.a", "1")
	_, err = alice.Publish(ctx, "ev.a", []byte("2"))
	quotaRefusal(t, err, "rpm", "user alice")
	publish(t, bob, "ev.a", "1")
	// Her own limit lifted (semaq user quota alice --rpm 0): the tenant's
	// 2 left are hers too, and then the tenant's quota holds.
	zero := int64(0)
	if info, err := admin.SetUserQuota(ctx, "alice", &zero, nil); err != nil || info.RPM != 0 {
		t.Fatalf("set quota: %+v %v", info, err)
	}
	// An admin change: audited with the user before and after.
	recs, err := admin.Audit(ctx, semaq.AuditListRequest{Op: semaq.AuditOpUserQuota})
	if err != nil || len(recs.Records) != 1 || recs.Records[0].Target != "alice" ||
		!strings.Contains(string(recs.Records[0].Before), `"rpm":1`) || strings.Contains(string(recs.Records[0].After), `"rpm"`) {
		t.Fatalf("audit of the quota change: %+v %v", recs, err)
	}
	publish(t, alice, "ev.a", "3")
	publish(t, alice, "ev.a", "4")
	_, err = alice.Publish(ctx, "ev.a", []byte("5"))
	quotaRefusal(t, err, "rpm", "tenant acme")

	// A user added now with a tpm, in a tenant without a quota.
	carol := user(semaq.UserAddRequest{Name: "carol", Tenant: "zeta", TPM: 100})
	publish(t, carol, "ev.a", "x", client.WithPromptTokens(100))
	_, err = carol.Publish(ctx, "ev.a", []byte("x"), client.WithPromptTokens(1))
	quotaRefusal(t, err, "tpm", "user carol (tenant zeta) is over its quota of 100 tokens per minute")
	// The admin, without a quota, is not limited by anyone's.
	for i := range 10 {
		publish(t, admin, "ev.a", fmt.Sprint(i), client.WithTenant("zeta"))
	}
}

func adminKey(t *testing.T, s *broker.Server) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Config().DataDir, broker.AdminKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// waitUntil polls cond, with a deadline.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		<-tick.C
	}
}

// TestQuotaConfigFile: the quotas of a config file, and a bad one refused
// naming the setting.
func TestQuotaConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "semaq.yaml")
	if err := os.WriteFile(file, []byte("quotas:\n  default: {rpm: 600, tpm: 100000}\n  tenants:\n    acme: {rpm: 60, max_queued_tokens: 50000}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := broker.DefaultConfig()
	if err := broker.LoadConfigFile(file, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Quotas.Default != (quota.Limits{RPM: 600, TPM: 100000}) || cfg.Quotas.Tenants["acme"] != (quota.Limits{RPM: 60, MaxQueuedTokens: 50000}) {
		t.Fatalf("quotas read as %+v", cfg.Quotas)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Quotas.Tenants["acme"] = quota.Limits{TPM: -1}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "quotas.tenants.acme.tpm: -1 is negative") {
		t.Fatalf("Validate: %v", err)
	}
	if err := os.WriteFile(file, []byte("quotas:\n  default: {rpms: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := broker.LoadConfigFile(file, &cfg); err == nil || !strings.Contains(err.Error(), "rpms") {
		t.Fatalf("a misspelt key: %v", err)
	}
}

// TestQuotaHostileTenantNames: a publisher inventing a tenant name per
// message, under a default quota, never grows the node's bucket table past
// max_tenants; the names past it share one bucket, so the flood buys no
// quota; a configured tenant keeps its own.
func TestQuotaHostileTenantNames(t *testing.T) {
	clk := brokertest.NewStepClock()
	s := startQuotaNode(t, clk, func(c *broker.Config) {
		c.Quotas = quota.Config{Default: quota.Limits{RPM: 50}, Tenants: map[string]quota.Limits{"acme": {RPM: 1}}, MaxTenants: 20}
	})
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	brokertest.AddStream(t, c, "EV", "ev.>")
	admitted, refused := 0, 0
	for i := range 500 {
		_, err := c.Publish(ctx, "ev.a", []byte("x"), client.WithTenant(fmt.Sprintf("made-up-%d", i)))
		switch {
		case err == nil:
			admitted++
		case errors.Is(err, semaq.ErrOverloaded):
			if !strings.Contains(err.Error(), "sharing the quota of the tenants past the node's bound") {
				t.Fatalf("refusal %q does not say the bucket is shared", err)
			}
			refused++
		default:
			t.Fatal(err)
		}
	}
	// 20 names with their own bucket, then 50 a minute between all the others.
	if admitted != 20+50 || refused != 500-70 {
		t.Fatalf("%d admitted, %d refused; want 70 and 430", admitted, refused)
	}
	if n, _ := broker.QuotaSizes(s); n > 20 {
		t.Fatalf("%d tenant buckets after the flood, bound 20", n)
	}
	publish(t, c, "ev.a", "x", client.WithTenant("acme"))
	if n, _ := broker.QuotaSizes(s); n > 21 {
		t.Fatalf("%d tenant buckets, bound 20 and the configured tenant", n)
	}
	// A 200 KB tenant name is the envelope's problem, refused before any quota.
	_, err := c.Publish(ctx, "ev.a", []byte("x"), client.WithHeader(semaq.HdrTenant, strings.Repeat("t", 200<<10)))
	if err == nil || errors.Is(err, semaq.ErrOverloaded) {
		t.Fatalf("a 200 KB tenant: %v", err)
	}
}
