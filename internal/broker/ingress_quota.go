package broker

import (
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/dispatch"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/semaq"
)

// ingressQuota is the quota check of the admission step
// (internal/broker/quota, docs/quotas.md): the node's limiter and how the
// ingress learns who sent a message.
type ingressQuota struct {
	lim *quota.Limiter
	// userOf names the store user that sent a message ("" for none): the
	// message's principal with auth on, nil with auth off. It is asked
	// only while some user has a quota (anyUser).
	userOf  func(h nats.Header) string
	anyUser func() bool
}

// quotaRequest is what p asks of the quotas: its tenant (AI-Tenant after
// the envelope step), its user, and its prompt tokens as every other
// token count of the broker reckons them.
func (q *ingressQuota) request(p *publication, queued bool) quota.Request {
	r := quota.Request{
		Tenant: p.env.Tenant,
		Tokens: dispatch.RequestTokens(int64(p.env.PromptTokens), len(p.m.Data)),
		Queued: queued,
	}
	if q.userOf != nil && q.anyUser() {
		r.User = q.userOf(p.m.Header)
	}
	return r
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
