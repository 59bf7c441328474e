package quota

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a fake clock the tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newLimiter(t *testing.T, cfg Config, deps Deps) (*Limiter, *clock) {
	t.Helper()
	c := newClock()
	deps.Now = c.now
	l, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

func TestTenantRPM(t *testing.T) {
	l, c := newLimiter(t, Config{Tenants: map[string]Limits{"acme": {RPM: 3}}}, Deps{})
	for i := range 3 {
		if r := l.Admit(Request{Tenant: "acme"}); r != nil {
			t.Fatalf("request %d: %v", i+1, r)
		}
	}
	r := l.Admit(Request{Tenant: "acme"})
	if r == nil {
		t.Fatal("4th request within the minute admitted")
	}
	if r.Kind != KindRPM || r.Scope != ScopeTenant || r.Tenant != "acme" || r.RetryAfter != 20*time.Second {
		t.Fatalf("refusal %+v, want rpm of tenant acme, retry after 20s", r)
	}
	for _, want := range []string{"tenant acme", "3 requests per minute", "rpm", "retry after 20s"} {
		if !strings.Contains(r.Error(), want) {
			t.Errorf("%q does not say %q", r.Error(), want)
		}
	}
	// Another tenant, without a quota, passes; so does acme once the wait is over.
	if r := l.Admit(Request{Tenant: "other"}); r != nil {
		t.Fatalf("tenant without a quota refused: %v", r)
	}
	c.add(r.RetryAfter)
	if r := l.Admit(Request{Tenant: "acme"}); r != nil {
		t.Fatalf("refused after the retry-after: %v", r)
	}
	if r := l.Admit(Request{Tenant: "acme"}); r == nil {
		t.Fatal("a second request admitted where the refill allows one")
	}
}

func TestTenantTPM(t *testing.T) {
	l, c := newLimiter(t, Config{Default: Limits{TPM: 1000}}, Deps{})
	if r := l.Admit(Request{Tenant: "a", Tokens: 600}); r != nil {
		t.Fatal(r)
	}
	r := l.Admit(Request{Tenant: "a", Tokens: 600})
	if r == nil || r.Kind != KindTPM || r.Tokens != 600 {
		t.Fatalf("refusal %+v, want tpm", r)
	}
	// 200 tokens short: 200/1000 of a minute.
	if r.RetryAfter != 12*time.Second {
		t.Fatalf("retry after %s, want 12s", r.RetryAfter)
	}
	if !strings.Contains(r.Error(), "1000 tokens per minute (tpm): this request has 600 prompt tokens") {
		t.Errorf("%q", r.Error())
	}
	// The default applies to every tenant on its own: b has its whole allowance.
	if r := l.Admit(Request{Tenant: "b", Tokens: 1000}); r != nil {
		t.Fatal(r)
	}
	c.add(12 * time.Second)
	if r := l.Admit(Request{Tenant: "a", Tokens: 600}); r != nil {
		t.Fatal(r)
	}
}

func TestOversizeRequest(t *testing.T) {
	l, c := newLimiter(t, Config{Default: Limits{TPM: 100}}, Deps{})
	if r := l.Admit(Request{Tenant: "a", Tokens: 250}); r != nil {
		t.Fatalf("a request larger than the minute's allowance on a full bucket: %v", r)
	}
	r := l.Admit(Request{Tenant: "a", Tokens: 1})
	if r == nil || r.RetryAfter != 90*time.Second+600*time.Millisecond {
		t.Fatalf("after 250 tokens at 100 tpm: %+v, want a wait of 1m30.6s", r)
	}
	c.add(r.RetryAfter)
	if r := l.Admit(Request{Tenant: "a", Tokens: 1}); r != nil {
		t.Fatal(r)
	}
}

func TestUserQuotaOnTopOfTenant(t *testing.T) {
	users := map[string]Limits{"alice": {RPM: 2}}
	l, _ := newLimiter(t, Config{Tenants: map[string]Limits{"acme": {RPM: 3}}},
		Deps{UserLimits: func(u string) Limits { return users[u] }})
	for range 2 {
		if r := l.Admit(Request{Tenant: "acme", User: "alice"}); r != nil {
			t.Fatal(r)
		}
	}
	r := l.Admit(Request{Tenant: "acme", User: "alice"})
	if r == nil || r.Scope != ScopeUser || r.User != "alice" || r.Kind != KindRPM {
		t.Fatalf("alice's 3rd: %+v, want her own rpm", r)
	}
	if !strings.Contains(r.Error(), "user alice (tenant acme)") {
		t.Errorf("%q", r.Error())
	}
	// Her refusal charged nothing to acme: bob (no quota of his own) has the tenant's last request.
	if r := l.Admit(Request{Tenant: "acme", User: "bob"}); r != nil {
		t.Fatalf("bob: %v", r)
	}
	r = l.Admit(Request{Tenant: "acme", User: "bob"})
	if r == nil || r.Scope != ScopeTenant {
		t.Fatalf("bob's 2nd: %+v, want the tenant's rpm", r)
	}
}

func TestLongestWaitReported(t *testing.T) {
	users := map[string]Limits{"alice": {RPM: 1}}
	l, _ := newLimiter(t, Config{Default: Limits{RPM: 2}},
		Deps{UserLimits: func(u string) Limits { return users[u] }})
	if r := l.Admit(Request{Tenant: "t", User: "alice"}); r != nil {
		t.Fatal(r)
	}
	if r := l.Admit(Request{Tenant: "t"}); r != nil {
		t.Fatal(r)
	}
	// Both refuse now: the tenant until 30 s, alice until 60 s.
	r := l.Admit(Request{Tenant: "t", User: "alice"})
	if r == nil || r.Scope != ScopeUser || r.RetryAfter != time.Minute {
		t.Fatalf("%+v, want alice's wait of 1m", r)
	}
}

func TestQueuedTokens(t *testing.T) {
	queued := map[string]int64{"acme": 900}
	var asked []string
	l, _ := newLimiter(t, Config{Tenants: map[string]Limits{"acme": {MaxQueuedTokens: 1000}}}, Deps{
		QueuedTokens: func(tenant string) (int64, float64) {
			asked = append(asked, tenant)
			return queued[tenant], 50
		},
	})
	if r := l.Admit(Request{Tenant: "acme", Tokens: 100, Queued: true}); r != nil {
		t.Fatal(r)
	}
	r := l.Admit(Request{Tenant: "acme", Tokens: 200, Queued: true})
	if r == nil || r.Kind != KindQueuedTokens || r.Queued != 900 || r.RetryAfter != 2*time.Second {
		t.Fatalf("%+v, want max_queued_tokens, 900 queued, retry after 100/50 s", r)
	}
	if !strings.Contains(r.Error(), "1000 queued prompt tokens (max_queued_tokens): 900 queued and 200 more asked") {
		t.Errorf("%q", r.Error())
	}
	// Not bound to a queue: not asked.
	asked = nil
	if r := l.Admit(Request{Tenant: "acme", Tokens: 5000}); r != nil || len(asked) != 0 {
		t.Fatalf("event message: %v, asked %v", r, asked)
	}
	// Nothing queued: any size passes.
	queued["acme"] = 0
	if r := l.Admit(Request{Tenant: "acme", Tokens: 5000, Queued: true}); r != nil {
		t.Fatal(r)
	}
}

func TestOffByDefault(t *testing.T) {
	calls := 0
	l, _ := newLimiter(t, Config{}, Deps{UserLimits: func(string) Limits { calls++; return Limits{} }})
	for i := range 1000 {
		if r := l.Admit(Request{Tenant: fmt.Sprint(i), User: "u", Tokens: 1 << 20, Queued: true}); r != nil {
			t.Fatal(r)
		}
	}
	if n, u := l.Sizes(); n+u != 0 {
		t.Fatalf("no quota configured, yet %d tenant and %d user buckets", n, u)
	}
	if calls != 1000 {
		t.Fatalf("user limits asked %d times", calls)
	}
}

// TestTableBounded: made-up tenant names under the default quota never
// grow the table past its bound; past it they share one bucket, so
// inventing names buys no quota, while a configured tenant keeps its own.
func TestTableBounded(t *testing.T) {
	l, c := newLimiter(t, Config{Default: Limits{RPM: 2}, Tenants: map[string]Limits{"acme": {RPM: 1}}, MaxTenants: 10}, Deps{})
	for i := range 10 {
		if r := l.Admit(Request{Tenant: fmt.Sprintf("t%d", i)}); r != nil {
			t.Fatal(r)
		}
	}
	// Past the bound: two requests in all, whatever the names.
	if r := l.Admit(Request{Tenant: "x1"}); r != nil {
		t.Fatal(r)
	}
	if r := l.Admit(Request{Tenant: "x2"}); r != nil {
		t.Fatal(r)
	}
	r := l.Admit(Request{Tenant: "x3"})
	if r == nil || !r.Shared {
		t.Fatalf("3rd request past the bound: %+v, want the shared bucket's refusal", r)
	}
	if !strings.Contains(r.Error(), "sharing the quota of the tenants past the node's bound") {
		t.Errorf("%q", r.Error())
	}
	for i := range 10000 {
		l.Admit(Request{Tenant: fmt.Sprintf("flood%d", i)})
	}
	// The configured tenant has its own bucket whatever the flood.
	if r := l.Admit(Request{Tenant: "acme"}); r != nil {
		t.Fatalf("configured tenant: %v", r)
	}
	if n, _ := l.Sizes(); n > 11 {
		t.Fatalf("%d tenant buckets, bound 10 + 1 configured", n)
	}
	// Once their buckets are full again, the sweep makes room.
	c.add(time.Minute)
	if r := l.Admit(Request{Tenant: "late"}); r != nil {
		t.Fatal(r)
	}
	if r := l.Admit(Request{Tenant: "late"}); r != nil {
		t.Fatal(r)
	}
	if r := l.Admit(Request{Tenant: "late"}); r == nil || r.Shared {
		t.Fatalf("late tenant after the sweep: %+v, want its own bucket's refusal", r)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Default: Limits{RPM: -1}}, "quotas.default.rpm: -1 is negative"},
		{Config{Tenants: map[string]Limits{"acme": {TPM: -5}}}, "quotas.tenants.acme.tpm: -5 is negative"},
		{Config{Tenants: map[string]Limits{"acme": {MaxQueuedTokens: -5}}}, "quotas.tenants.acme.max_queued_tokens"},
		{Config{MaxTenants: -1}, "max_tenants"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
	if err := (&Config{Default: Limits{RPM: 1, TPM: 2, MaxQueuedTokens: 3}}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestConcurrentAdmitsNeverExceed(t *testing.T) {
	l, _ := newLimiter(t, Config{Default: Limits{RPM: 100}}, Deps{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if l.Admit(Request{Tenant: "t"}) == nil {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if admitted != 100 {
		t.Fatalf("%d of 400 racing requests admitted at 100 rpm with a stopped clock, want exactly 100", admitted)
	}
}

func TestRefund(t *testing.T) {
	users := map[string]Limits{"alice": {TPM: 100}}
	l, _ := newLimiter(t, Config{Default: Limits{RPM: 1}}, Deps{UserLimits: func(u string) Limits { return users[u] }})
	r := Request{Tenant: "acme", User: "alice", Tokens: 100}
	if ref := l.Admit(r); ref != nil {
		t.Fatal(ref)
	}
	// A later step refused it: given back, the same request fits again, once.
	l.Refund(r)
	if ref := l.Admit(r); ref != nil {
		t.Fatalf("after the refund: %v", ref)
	}
	if ref := l.Admit(r); ref == nil {
		t.Fatal("admitted twice on one request's allowance")
	}
	// A refund never makes a bucket more than full.
	l.Refund(r)
	l.Refund(r)
	l.Refund(r)
	if ref := l.Admit(r); ref != nil {
		t.Fatal(ref)
	}
	if ref := l.Admit(r); ref == nil {
		t.Fatal("refunds banked more than one minute's allowance")
	}
}

func TestChargeOutput(t *testing.T) {
	users := map[string]Limits{"alice": {TPM: 1000}}
	l, c := newLimiter(t, Config{Default: Limits{TPM: 1000}}, Deps{UserLimits: func(u string) Limits { return users[u] }})
	if r := l.Admit(Request{Tenant: "acme", User: "alice", Tokens: 100}); r != nil {
		t.Fatal(r)
	}
	// The worker reports 1,400 output tokens: spent, charged whatever the
	// bucket holds, to the tenant only.
	l.ChargeOutput("acme", 1400)
	r := l.Admit(Request{Tenant: "acme", User: "alice", Tokens: 1})
	if r == nil || r.Scope != ScopeTenant || r.Kind != KindTPM || r.RetryAfter != 30*time.Second+60*time.Millisecond {
		t.Fatalf("after 1,500 tokens at 1,000 tpm: %+v, want the tenant's tpm, 30.06s", r)
	}
	c.add(r.RetryAfter)
	if r := l.Admit(Request{Tenant: "acme", User: "alice", Tokens: 1}); r != nil {
		t.Fatal(r)
	}
	// A tenant without a tpm is not charged; nor is a report of nothing.
	l2, _ := newLimiter(t, Config{Tenants: map[string]Limits{"rpm-only": {RPM: 5}}}, Deps{})
	l2.ChargeOutput("rpm-only", 1<<40)
	l2.ChargeOutput("other", 1<<40)
	if n, _ := l2.Sizes(); n != 0 {
		t.Fatalf("%d buckets made for tenants without a tpm", n)
	}
}
