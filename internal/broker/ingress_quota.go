package broker

import (
	"github.com/semaq/semaq/internal/broker/dispatch"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/semaq"
)

// ingressQuota is the quota check of the admission step
// (internal/broker/quota, docs/quotas.md).
type ingressQuota struct {
	lim *quota.Limiter
}

// request is what p asks of the quotas: its tenant (AI-Tenant as the
// envelope step left it, stamped from the sender with auth on), its user
// (the principal the envelope step read), and its prompt tokens as every
// other token count of the broker reckons them.
func (q *ingressQuota) request(p *publication, queued bool) quota.Request {
	return quota.Request{
		Tenant: p.env.Tenant,
		User:   p.user,
		Tokens: dispatch.RequestTokens(int64(p.env.PromptTokens), len(p.m.Data)),
		Queued: queued,
	}
}

// quotaRefusal turns a quota's refusal into the ingress's: the overloaded
// error, naming the quota, whose it is and when to retry. Counted by
// tenant, quota and scope.
func (in *ingress) quotaRefusal(ref *quota.Refusal) *semaq.APIError {
	in.metrics.QuotaRefused(ref.Tenant, string(ref.Kind), string(ref.Scope))
	e := semaq.NewAPIError(semaq.ErrOverloaded, "quota: %s", ref.Error())
	e.RetryAfterMs = quota.CeilMs(ref.RetryAfter).Milliseconds()
	e.Quota = string(ref.Kind)
	return e
}
