// Package quota keeps the per-tenant and per-user quotas of a node
// (docs/quotas.md): requests per minute and tokens per minute, each
// a token bucket (bucket.go), and the prompt tokens a tenant may have
// waiting in work queues. The ingress asks Admit for every message before
// it is stored; a Refusal says which quota, whose, and when to retry.
//
// Quotas are per node: a Limiter counts what passes through its own
// node's ingress. It reaches nothing of the node but what Deps gives it,
// and starts no goroutine, so it has nothing to close.
package quota

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Limits are the quotas of one tenant or user. Zero means no limit.
type Limits struct {
	// RPM is the requests (messages) per minute.
	RPM int64 `json:"rpm,omitempty" yaml:"rpm"`
	// TPM is the tokens per minute: each message's prompt tokens
	// (AI-Prompt-Tokens, or its payload's estimate when it declares none)
	// at admission, and for a tenant the output tokens its work-queue
	// requests' workers report (ChargeOutput).
	TPM int64 `json:"tpm,omitempty" yaml:"tpm"`
	// MaxQueuedTokens bounds the prompt tokens of a tenant's requests
	// waiting in the node's work queues. Tenants only.
	MaxQueuedTokens int64 `json:"max_queued_tokens,omitempty" yaml:"max_queued_tokens"`
}

// IsZero reports whether l limits nothing.
func (l Limits) IsZero() bool { return l == Limits{} }

// Check reports a negative limit, naming it.
func (l Limits) Check() error {
	switch {
	case l.RPM < 0:
		return fmt.Errorf("rpm: %d is negative", l.RPM)
	case l.TPM < 0:
		return fmt.Errorf("tpm: %d is negative", l.TPM)
	case l.MaxQueuedTokens < 0:
		return fmt.Errorf("max_queued_tokens: %d is negative", l.MaxQueuedTokens)
	}
	return nil
}

// Kind names a quota.
type Kind string

// The quotas.
const (
	KindRPM          Kind = "rpm"
	KindTPM          Kind = "tpm"
	KindQueuedTokens Kind = "max_queued_tokens"
)

// Scope says whose quota refused: the tenant's or the user's.
type Scope string

// The scopes.
const (
	ScopeTenant Scope = "tenant"
	ScopeUser   Scope = "user"
)

// Bounds of the bucket tables (table.go).
const (
	// DefaultMaxTenants is how many tenants without a quota of their own
	// (under Config.Default) a node keeps buckets for.
	DefaultMaxTenants = 10000
	// DefaultMaxUsers is how many users with a quota a node keeps buckets
	// for.
	DefaultMaxUsers = 10000
)

// Config is a node's quotas.
type Config struct {
	// Default applies to every tenant not in Tenants, messages without a
	// tenant included.
	Default Limits `yaml:"default"`
	// Tenants are the tenants with quotas of their own.
	Tenants map[string]Limits `yaml:"tenants"`
	// MaxTenants bounds the tenants under Default the node keeps buckets
	// for; past it they share one bucket. 0: DefaultMaxTenants.
	MaxTenants int `yaml:"max_tenants"`
	// MaxUsers bounds the users the node keeps buckets for; past it they
	// share one bucket. 0: DefaultMaxUsers.
	MaxUsers int `yaml:"max_users"`
}

// IsZero reports whether c sets no quota.
func (c *Config) IsZero() bool {
	if !c.Default.IsZero() {
		return false
	}
	for _, l := range c.Tenants {
		if !l.IsZero() {
			return false
		}
	}
	return true
}

// Validate reports the first problem with c, naming the setting.
func (c *Config) Validate() error {
	if err := c.Default.Check(); err != nil {
		return fmt.Errorf("quotas.default.%w", err)
	}
	for t, l := range c.Tenants {
		if err := l.Check(); err != nil {
			return fmt.Errorf("quotas.tenants.%s.%w", t, err)
		}
	}
	if c.MaxTenants < 0 || c.MaxUsers < 0 {
		return errors.New("quotas.max_tenants and quotas.max_users may not be negative")
	}
	return nil
}

// Deps is what a Limiter asks of the node.
type Deps struct {
	// QueuedTokens returns the prompt tokens of tenant's requests waiting
	// in the node's work queues, and the rate (tokens a second) its
	// workers take prompt tokens at, 0 when unknown. Called without the
	// limiter's lock, only for a tenant with MaxQueuedTokens and a message
	// bound to a work queue. Nil: MaxQueuedTokens is not checked.
	QueuedTokens func(tenant string) (tokens int64, rate float64)
	// UserLimits returns the quota of a store user (zero: none). Called
	// without the limiter's lock for every message with a user. Nil: no
	// user quotas.
	UserLimits func(user string) Limits
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Request is one message to admit.
type Request struct {
	Tenant string
	// User is the store user that sent it; "" when none did.
	User string
	// Tokens are its prompt tokens, declared or estimated.
	Tokens int64
	// Queued: it is bound to a work queue, where MaxQueuedTokens applies.
	Queued bool
}

// Refusal says why a message was refused and when to retry.
type Refusal struct {
	Kind   Kind
	Scope  Scope
	Tenant string
	User   string // for ScopeUser
	Limit  int64
	Tokens int64 // the message's prompt tokens (TPM, queued tokens)
	Queued int64 // the tenant's queued prompt tokens (queued tokens)
	// Shared: the tenant or user is past the table's bound and shares one
	// bucket with the others past it.
	Shared     bool
	RetryAfter time.Duration
}

// Error describes the refusal for the publisher.
func (r *Refusal) Error() string {
	who := "tenant " + tenantName(r.Tenant)
	if r.Scope == ScopeUser {
		who = "user " + r.User + " (tenant " + tenantName(r.Tenant) + ")"
	}
	if r.Shared {
		who += ", sharing the quota of the " + string(r.Scope) + "s past the node's bound,"
	}
	var what string
	switch r.Kind {
	case KindRPM:
		what = fmt.Sprintf("its quota of %d %s per minute (rpm)", r.Limit, plural(r.Limit, "request", "requests"))
	case KindTPM:
		what = fmt.Sprintf("its quota of %d tokens per minute (tpm): this request has %d prompt tokens", r.Limit, r.Tokens)
	case KindQueuedTokens:
		what = fmt.Sprintf("its quota of %d queued prompt tokens (max_queued_tokens): %d queued and %d more asked",
			r.Limit, r.Queued, r.Tokens)
	}
	return fmt.Sprintf("%s is over %s; retry after %s", who, what, CeilMs(r.RetryAfter))
}

// CeilMs rounds d up to a whole millisecond: a retry a little late
// succeeds, a little early fails.
func CeilMs(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func tenantName(t string) string {
	if t == "" {
		return `"" (no AI-Tenant)`
	}
	return t
}

// Limiter admits or refuses messages by the quotas. Its methods are safe
// for concurrent use; Admit takes one short lock, and none when neither
// the tenant nor the user has a quota.
type Limiter struct {
	cfg   Config
	deps  Deps
	epoch time.Time

	mu      sync.Mutex
	tenants table
	users   table
}

// New makes a node's Limiter.
func New(cfg Config, deps Deps) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	l := &Limiter{cfg: cfg, deps: deps, epoch: deps.Now()}
	l.tenants.init(cfg.MaxTenants, DefaultMaxTenants)
	l.users.init(cfg.MaxUsers, DefaultMaxUsers)
	return l, nil
}

// TenantLimits are the quotas of tenant.
func (l *Limiter) TenantLimits(tenant string) Limits {
	if t, ok := l.cfg.Tenants[tenant]; ok {
		return t
	}
	return l.cfg.Default
}

// Admit charges r to its tenant's and its user's quotas when both allow
// it, and returns nil; otherwise it charges nothing and returns the
// refusal whose wait is longest: past it, every quota that refused would
// allow the message (were nothing else charged meanwhile).
func (l *Limiter) Admit(r Request) *Refusal {
	tl := l.TenantLimits(r.Tenant)
	var ul Limits
	if r.User != "" && l.deps.UserLimits != nil {
		ul = l.deps.UserLimits(r.User)
	}
	if tl.IsZero() && ul.IsZero() {
		return nil
	}
	if r.Tokens < 0 {
		r.Tokens = 0
	}
	if r.Queued && tl.MaxQueuedTokens > 0 && l.deps.QueuedTokens != nil {
		if ref := l.queued(r, tl.MaxQueuedTokens); ref != nil {
			return ref
		}
	}
	tb, ub := tl.RPM > 0 || tl.TPM > 0, ul.RPM > 0 || ul.TPM > 0
	if !tb && !ub {
		return nil
	}
	now := int64(l.deps.Now().Sub(l.epoch))
	rpmT, tpmT := charge(1, tl.RPM), charge(r.Tokens, tl.TPM)
	rpmU, tpmU := charge(1, ul.RPM), charge(r.Tokens, ul.TPM)

	l.mu.Lock()
	defer l.mu.Unlock()
	var te, ue *entry
	var teShared, ueShared bool
	if tb {
		_, pinned := l.cfg.Tenants[r.Tenant]
		te, teShared = l.tenants.get(r.Tenant, pinned, now)
	}
	if ub {
		ue, ueShared = l.users.get(r.User, false, now)
	}
	var worst *Refusal
	refuse := func(b *bucket, inc int64, kind Kind, scope Scope, limit int64, shared bool) {
		if ok, wait := b.fits(now, inc); !ok && (worst == nil || wait > worst.RetryAfter) {
			worst = &Refusal{Kind: kind, Scope: scope, Tenant: r.Tenant, Limit: limit, Tokens: r.Tokens,
				Shared: shared, RetryAfter: wait}
			if scope == ScopeUser {
				worst.User = r.User
			}
		}
	}
	if te != nil {
		if tl.RPM > 0 {
			refuse(&te.rpm, rpmT, KindRPM, ScopeTenant, tl.RPM, teShared)
		}
		if tl.TPM > 0 {
			refuse(&te.tpm, tpmT, KindTPM, ScopeTenant, tl.TPM, teShared)
		}
	}
	if ue != nil {
		if ul.RPM > 0 {
			refuse(&ue.rpm, rpmU, KindRPM, ScopeUser, ul.RPM, ueShared)
		}
		if ul.TPM > 0 {
			refuse(&ue.tpm, tpmU, KindTPM, ScopeUser, ul.TPM, ueShared)
		}
	}
	if worst != nil {
		return worst
	}
	if te != nil {
		if tl.RPM > 0 {
			te.rpm.take(now, rpmT)
		}
		if tl.TPM > 0 {
			te.tpm.take(now, tpmT)
		}
	}
	if ue != nil {
		if ul.RPM > 0 {
			ue.rpm.take(now, rpmU)
		}
		if ul.TPM > 0 {
			ue.tpm.take(now, tpmU)
		}
	}
	return nil
}

// ChargeOutput charges a request's output tokens to its tenant's tokens
// per minute once a worker has reported them (a work queue's ack):
// spent, so never refused, they may put the bucket in debt, and the
// tenant's next requests wait it out. Users are not charged: the worker's
// report names the request's tenant, not who sent it.
func (l *Limiter) ChargeOutput(tenant string, tokens int64) {
	tl := l.TenantLimits(tenant)
	if tl.TPM <= 0 || tokens <= 0 {
		return
	}
	now := int64(l.deps.Now().Sub(l.epoch))
	inc := charge(tokens, tl.TPM)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, pinned := l.cfg.Tenants[tenant]
	e, _ := l.tenants.get(tenant, pinned, now)
	e.tpm.force(now, inc)
}

// Refund gives back what Admit charged for r, when a later step refused
// the message (a work queue's own admission control): a message that is
// not stored costs no quota. Limits changed in between make the refund
// approximate, never negative.
func (l *Limiter) Refund(r Request) {
	tl := l.TenantLimits(r.Tenant)
	var ul Limits
	if r.User != "" && l.deps.UserLimits != nil {
		ul = l.deps.UserLimits(r.User)
	}
	if tl.RPM == 0 && tl.TPM == 0 && ul.RPM == 0 && ul.TPM == 0 {
		return
	}
	r.Tokens = max(r.Tokens, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.tenants.lookup(r.Tenant); e != nil {
		e.rpm.refund(charge(1, tl.RPM))
		e.tpm.refund(charge(r.Tokens, tl.TPM))
	}
	if e := l.users.lookup(r.User); e != nil && r.User != "" {
		e.rpm.refund(charge(1, ul.RPM))
		e.tpm.refund(charge(r.Tokens, ul.TPM))
	}
}

// queued checks the tenant's queued prompt tokens. A tenant with nothing
// queued is admitted whatever the request's size, so a request larger
// than the quota is not refused for ever.
func (l *Limiter) queued(r Request, limit int64) *Refusal {
	q, rate := l.deps.QueuedTokens(r.Tenant)
	if q <= 0 || q+r.Tokens <= limit {
		return nil
	}
	wait := time.Second
	if rate > 0 {
		secs := float64(q+r.Tokens-limit) / rate
		wait = min(max(time.Duration(secs*float64(time.Second)), time.Second), time.Minute)
	}
	return &Refusal{Kind: KindQueuedTokens, Scope: ScopeTenant, Tenant: r.Tenant, Limit: limit, Tokens: r.Tokens,
		Queued: q, RetryAfter: wait}
}

// Sizes reports how many tenants and users the limiter keeps buckets for.
func (l *Limiter) Sizes() (tenants, users int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.tenants.m), len(l.users.m)
}
