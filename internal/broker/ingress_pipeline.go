package broker

import (
	"context"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/internal/tracevocab"
	"github.com/semaq/semaq/semaq"
)

// The ingress pipeline. Every message published on a stream's subjects
// goes through these steps, in this order, on the subscription's goroutine
// (ingress.handle):
//
//  1. envelope   reply and subject checks, then header normalisation
//     (semaq.Normalize): the AI-* envelope every later step reads. Not a
//     step: a message without an envelope has no tenant or trace yet.
//  2. schema     schema-on-write against the subject's bound registry
//     subject (schema_on_write.go).
//  3. policy     the node's policy steps, in.policy, in order. None are
//     built in today: this is where PII redaction, plugins and provenance
//     plug in. A policy step sees the validated payload and envelope, may
//     rewrite the payload or headers, and may refuse; what it leaves is
//     what routing sees and what is stored.
//  4. route      route rules pick the subject to store under and the
//     stream that captures it (ingress_route.go).
//  5. admission  the tenant's and user's quotas (ingress_quota.go), then
//     the target queue's admission control: bounds and reservations
//     (dispatch.Dispatcher.Admit).
//  6. append     publish into the storage namespace (ingress.append).
//
// A step refuses with a *semaq.APIError: the message is not stored, the
// publisher gets the error as its reply, and the refusal is counted under
// the error's reason. Tracing wraps every step alike (runStep): when the
// message's ingress span records, a step that names a span (spanName) runs
// inside a child span, which records the step's refusal.

// stampTenant makes the tenant of p its publisher's (docs/security.md,
// Tenants), after the envelope is read, so every later step, the metrics
// and the stored message see it: a user with a tenant publishes for that
// tenant only, and a message naming no tenant gets the user's. Services
// and admins act for tenants: the tenant they name is kept.
func stampTenant(p *publication, who api.Principal) *semaq.APIError {
	sent := p.env.Tenant
	switch {
	case sent == who.Tenant:
		return nil
	case sent == "":
		p.m.Header.Set(semaq.HdrTenant, who.Tenant)
		p.env.Tenant = who.Tenant
		return nil
	case who.Role == semaq.RoleService || who.Role == semaq.RoleAdmin:
		return nil
	case who.Tenant == "":
		return semaq.NewAPIError(semaq.ErrForbidden, "publish on %s: %s %q: user %s has no tenant and may not publish for one; only a service or admin acts for tenants",
			p.m.Subject, semaq.HdrTenant, sent, who.User)
	default:
		return semaq.NewAPIError(semaq.ErrForbidden, "publish on %s: %s %q is not the tenant of user %s (%s); leave it out, or publish as a service",
			p.m.Subject, semaq.HdrTenant, sent, who.User, who.Tenant)
	}
}

// takeOwnerHeaders reads the headers that name a request's owner
// (docs/queues.md, Cancel): the publisher's cancel token is taken out (the
// stored message keeps its SHA-256 only, when its stream is a queue:
// append), and the headers the ingress stamps may not come from a client.
// who is the sender, stamped as the publisher with auth on.
func takeOwnerHeaders(p *publication, who api.Principal) *semaq.APIError {
	h := p.m.Header
	for k, vs := range h {
		switch {
		case strings.EqualFold(k, semaq.HdrCancelSum), strings.EqualFold(k, semaq.HdrPublisher):
			return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: header %s is stamped by the broker; a client may not set it", p.m.Subject, k)
		case strings.EqualFold(k, semaq.HdrCancelToken):
			if len(vs) != 1 {
				return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: header %s is given %d times", p.m.Subject, k, len(vs))
			}
			if err := semaq.CheckCancelToken(vs[0]); err != nil {
				return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: header %s: %v", p.m.Subject, k, err)
			}
			p.cancel = vs[0]
			delete(h, k)
		}
	}
	if who.Who == api.User {
		h.Set(semaq.HdrPublisher, who.User)
	}
	return nil
}

// publication is one message on its way through the pipeline.
type publication struct {
	m       *nats.Msg
	env     semaq.Envelope
	subject string         // the subject it is stored under; routing may change it
	stream  *ingressStream // the stream that stores it; routing may change it
	user    string         // the store user that sent it (auth on), for its quota
	cancel  string         // its cancel token (semaq.HdrCancelToken), dropped from its headers
	obs     msgObs
	out     *wire.Conn // the connection that appends it
}

// step is one stage of the pipeline: a built-in step, or a policy step.
// Steps are dispatched by kind with direct calls, which keeps a
// publication on the handler's stack.
type step struct {
	kind   stepKind
	policy *PolicyStep // for stepPolicy
}

type stepKind uint8

const (
	stepSchema stepKind = iota
	stepPolicy
	stepRoute
	stepAdmission
)

// A PolicyStep is a policy step of the ingress (step 3 above).
type PolicyStep struct {
	// Name names the step's span ("policy <Name>").
	Name string
	// Run may change m's data and headers (env is the envelope they were
	// read into) and refuses the message by returning an error. m and its
	// Data are valid only until Run returns: Data points into the
	// ingress's read buffer (copy it to keep it; assign a new slice to
	// change it).
	Run func(m *nats.Msg, env *semaq.Envelope) *semaq.APIError
}

// steps builds the pipeline between the envelope and the append.
func steps(policy []PolicyStep) []step {
	out := []step{{kind: stepSchema}}
	for i := range policy {
		out = append(out, step{kind: stepPolicy, policy: &policy[i]})
	}
	return append(out, step{kind: stepRoute}, step{kind: stepAdmission})
}

// noSpan is the span of a step run without one.
var noSpan = trace.SpanFromContext(context.Background())

// runStep runs s for p, in a child span of the ingress span when that
// records and s names one.
func (in *ingress) runStep(s *step, p *publication) *semaq.APIError {
	if p.obs.span == nil || !p.obs.span.IsRecording() {
		return in.run(s, p, noSpan)
	}
	name := in.spanName(s, p)
	if name == "" {
		return in.run(s, p, noSpan)
	}
	_, sp := in.tracing.StartChild(p.obs.ctx, name)
	defer sp.End()
	e := in.run(s, p, sp)
	if e != nil {
		telemetry.Fail(sp, rejectReason(e), e)
	}
	return e
}

// spanName names the child span s runs in for p; "" runs it without one.
// Called only when the ingress span records.
func (in *ingress) spanName(s *step, p *publication) string {
	switch s.kind {
	case stepSchema:
		if in.reg == nil {
			return ""
		}
		if b, ok := in.reg.BindingFor(p.m.Subject); ok {
			return "schema " + tracevocab.ValidUTF8(b.Subject)
		}
	case stepPolicy:
		return "policy " + s.policy.Name
	case stepRoute:
		if in.routes != nil && in.routes.Table().Len() > 0 {
			return "route " + tracevocab.ValidUTF8(p.m.Subject)
		}
	}
	return ""
}

// run does step s for p; sp is its span, non-recording when it has none.
func (in *ingress) run(s *step, p *publication, sp trace.Span) *semaq.APIError {
	switch s.kind {
	case stepSchema:
		return in.schemaStep(p, sp)
	case stepPolicy:
		env := p.env // a copy: the policy's func must not pin p to the heap
		e := s.policy.Run(p.m, &env)
		p.env = env
		return e
	case stepRoute:
		return in.routeStep(p, sp)
	case stepAdmission:
		return in.admissionStep(p)
	}
	return nil
}

// schemaStep: schema-on-write, when the subject is bound.
func (in *ingress) schemaStep(p *publication, sp trace.Span) *semaq.APIError {
	if in.reg == nil {
		return nil
	}
	if e := checkSchema(in.reg, p.m, p.env.SchemaID); e != nil {
		return e
	}
	if sp.IsRecording() {
		if n, err := strconv.ParseInt(p.m.Header.Get(semaq.HdrSchemaID), 10, 64); err == nil {
			sp.SetAttributes(telemetry.AttrSchemaID.Int64(n))
		}
	}
	return nil
}

// routeStep: the route rules, when there are any.
func (in *ingress) routeStep(p *publication, sp trace.Span) *semaq.APIError {
	if in.routes == nil {
		return nil
	}
	rt := in.routes.Table()
	if rt.Len() == 0 {
		return nil
	}
	origin := p.subject
	subject, st, r, e := in.routeRule(rt, p.stream, p.m)
	if sp.IsRecording() && r != nil {
		sp.SetAttributes(telemetry.AttrRoute.String(r.Name()))
	}
	if e != nil {
		return e
	}
	p.subject, p.stream = subject, st
	if sp.IsRecording() {
		sp.SetAttributes(telemetry.AttrRouteTarget.String(tracevocab.ValidUTF8(subject)))
		if subject != origin {
			p.obs.span.SetAttributes(tracevocab.AttrOriginSubject.String(tracevocab.ValidUTF8(origin)),
				tracevocab.AttrMsgDest.String(tracevocab.ValidUTF8(subject)))
		}
	}
	return nil
}

// admissionStep: the quotas, then the admission control of the queue the
// message is for. A message the queue refuses gets its quota back.
func (in *ingress) admissionStep(p *publication) *semaq.APIError {
	if e := in.memory.refusal(); e != nil {
		in.metrics.MemoryRefused()
		return e
	}
	var d queueAdmitter // this node's dispatcher, or the node dispatching the queue
	if qs := in.queues.Load(); qs != nil {
		d = (*qs)[p.stream.name]
	}
	q := in.quota.Load()
	if q == nil {
		if d != nil {
			return d.Admit(&p.env, len(p.m.Data))
		}
		return nil
	}
	r := q.request(p, d != nil)
	if ref := q.lim.Admit(r); ref != nil {
		return in.quotaRefusal(ref)
	}
	if d != nil {
		if e := d.Admit(&p.env, len(p.m.Data)); e != nil {
			q.lim.Refund(r)
			return e
		}
	}
	return nil
}
