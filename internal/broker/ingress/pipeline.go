package ingress

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/internal/broker/routes/table"
	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/internal/tracevocab"
	"github.com/semaq/semaq/policy"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// The pipeline. Every message published on a stream's subjects takes these
// steps, in this order, on its shard's goroutine (handle):
//
//  1. envelope   the reply and subject checks, header normalisation
//     (semaq.Normalize: the AI-* envelope every later step reads), the
//     sender's tenant stamped and the owner headers taken.
//  2. policy     the node's policy steps (package policy), in order: each
//     passes the message, rewrites it (the envelope is read again) or
//     refuses it.
//  3. schema     schema-on-write against the subject's bound registry
//     subject (schema.go): it validates the payload as the policy left
//     it, which is what is stored.
//  4. route      the route rules pick the subject to store under and the
//     stream that captures it.
//  5. admission  memory, the tenant's and user's quotas, then the target
//     queue's admission control (bounds and reservations).
//  6. append     publish into the storage namespace with the reply
//     subject acks.go picks.
//
// A step refuses with a *semaq.APIError: the message is not stored, the
// publisher gets the error as its reply (reject), and the refusal is
// counted under the error's reason. When the message's ingress span
// records, the schema, policy and route steps run in child spans, which
// record their refusal.
//
// Check runs steps 1 to 4 as a dry run, for `semaq route test`.

// publication is one message on its way through the pipeline.
type publication struct {
	m         *nats.Msg
	hdrErr    error // why m's header block could not be read
	received  time.Time
	who       api.Principal // the sender
	env       semaq.Envelope
	subject   string  // the subject it is stored under; routing may change it
	stream    *stream // the stream that stores it; routing may change it
	cancel    string  // its cancel token (semaq.HdrCancelToken), taken from its headers
	tenant    string  // a store user's tenant as stamped (checkStamped)
	rule      *table.Rule
	target    *table.Target // the rule's pick; nil when no rule matched
	refusedBy string        // the step that refused it (run)
	// order is its place in its session, in a strictly ordered stream
	// (checkOrder).
	order    semaq.OrderValue
	hasOrder bool

	// dry: a dry run (Check). ctx is its context, which policy steps get;
	// on the hot path they get the message span's.
	dry bool
	ctx context.Context

	obs msgObs
	out *wire.Conn // the connection that appends it
}

// handle is the hot path: the pipeline once per published message, then
// the append on out.
func (in *Ingress) handle(out *wire.Conn, st *stream, po *pattern, m *nats.Msg, hdrErr error) {
	if m.Header == nil {
		m.Header = make(nats.Header, 1)
	}
	p := publication{m: m, hdrErr: hdrErr, received: time.Now(), subject: m.Subject, stream: st, obs: msgObs{po: po}, out: out}
	defer p.obs.end()
	if m.Reply != "" {
		if err := semaq.CheckReplySubject(m.Reply); err != nil {
			// JetStream would send its PubAck there with the broker's
			// rights: refuse, and answer nobody.
			m.Reply = ""
			in.reject(&p, semaq.NewAPIError(semaq.ErrBadRequest, "publish on %s: %v", m.Subject, err))
			return
		}
	}
	if len(m.Header[semaq.HdrBatchID]) > 0 {
		in.stockMsg(&p)
		return
	}
	if e := in.publish(&p, in.sender(m)); e != nil {
		in.reject(&p, e)
	}
}

// sender is who sent m, from the headers the NATS server set, which are
// then dropped: readers of the stream never see the publisher's address.
func (in *Ingress) sender(m *nats.Msg) api.Principal {
	if in.principal == nil {
		return api.Principal{}
	}
	who := in.principal(m.Header)
	m.Header.Del(api.RequestInfoHeader)
	return who
}

// publish takes p through the pipeline and appends it: the first
// refusal ends it.
func (in *Ingress) publish(p *publication, who api.Principal) *semaq.APIError {
	if e := in.run(p, who); e != nil {
		return e
	}
	r, e := readReport(p)
	if e != nil {
		return e
	}
	if k, ok := chainKeyOf(p); ok {
		e = in.chain(p, k)
	} else {
		e = in.append(p)
	}
	if e != nil {
		return e
	}
	in.stored(p, r)
	return nil
}

// report is what a message says of its session: its AI-Confidence.
type report struct {
	conf    float64
	hasConf bool
}

// readReport reads p's report on its session, if it names one.
func readReport(p *publication) (report, *semaq.APIError) {
	if p.env.Session == "" {
		return report{}, nil
	}
	c, ok, e := confidence(p.m)
	return report{c, ok}, e
}

// stored counts p, handed to JetStream, and tells its session.
func (in *Ingress) stored(p *publication, r report) {
	in.accepted.Add(1)
	p.obs.accepted(in, &p.env)
	if p.env.Session != "" {
		if observe := in.sessions.Load(); observe != nil {
			(*observe)(p.env.Tenant, p.env.Session, r.conf, r.hasConf)
		}
	}
}

// confidence reads a message's AI-Confidence, the report on its session
// (docs/sessions.md): a number from 0 to 1, given once.
func confidence(m *nats.Msg) (float64, bool, *semaq.APIError) {
	for k, vs := range m.Header {
		if !strings.EqualFold(k, semaq.HdrConfidence) {
			continue
		}
		if len(vs) != 1 {
			return 0, false, semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: header %s is given %d times", m.Subject, semaq.HdrConfidence, len(vs))
		}
		c, err := strconv.ParseFloat(vs[0], 64)
		if err != nil || !(c >= 0 && c <= 1) {
			return 0, false, semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: header %s %q is not a number from 0 to 1", m.Subject, semaq.HdrConfidence, vs[0])
		}
		return c, true, nil
	}
	return 0, false, nil
}

// Decision is what the ingress does with a message, as far as a dry run
// took it: the stream and subject it is stored under, the route rule that
// sent it there and the rule's pick (nil when no rule matched), the
// message as it would be stored, and the step that refused it.
type Decision struct {
	Stream    string
	Subject   string
	Rule      *table.Rule
	Target    *table.Target
	Header    nats.Header
	Data      []byte
	RefusedBy string
}

// Check runs the pipeline on m as the hot path runs it for a message from
// who, up to admission: the envelope, the policy steps (for which
// policy.DryRun(ctx) is true), the schema and the route rules. It takes no
// quota and reserves no queue room, and nothing is stored or counted. m is
// changed as the hot path changes it (stamped, rewritten). The error is
// the refusal the publisher would get; the decision says how far the
// message got.
func (in *Ingress) Check(ctx context.Context, m *nats.Msg, who api.Principal) (Decision, error) {
	if m.Header == nil {
		m.Header = make(nats.Header)
	}
	m.Header.Del(api.RequestInfoHeader)
	st, _ := in.served.find(m.Subject)
	if st == nil {
		return Decision{Subject: m.Subject, Header: m.Header, Data: m.Data, RefusedBy: StepSubject},
			semaq.NewAPIError(semaq.ErrNoStream, "no stream captures subject %s; nothing would be stored", m.Subject)
	}
	p := publication{m: m, received: time.Now(), subject: m.Subject, stream: st, dry: true, ctx: policy.WithDryRun(ctx)}
	e := in.run(&p, who)
	d := Decision{Stream: p.stream.name, Subject: p.subject, Rule: p.rule, Target: p.target, Header: m.Header, Data: m.Data, RefusedBy: p.refusedBy}
	if e != nil {
		return d, e
	}
	return d, nil
}

// The steps, as Decision.RefusedBy names them.
const (
	StepSubject  = "subject" // no stream captures the subject (a dry run's only)
	StepEnvelope = "envelope"
	StepPolicy   = "policy"
	StepOrder    = "order" // a strictly ordered session's (chain.go)
	StepSchema   = "schema"
	StepRoute    = "route"
)

// run takes p through the steps from the envelope to admission (a dry run
// stops before it); the first refusal ends it, and p.refusedBy names its
// step.
func (in *Ingress) run(p *publication, who api.Principal) *semaq.APIError {
	if e := in.envelope(p, who); e != nil {
		p.refusedBy = StepEnvelope
		return e
	}
	if e := in.applyPolicy(p); e != nil {
		p.refusedBy = StepPolicy
		return e
	}
	if e := in.checkOrder(p); e != nil {
		p.refusedBy = StepOrder
		return e
	}
	if e := in.validate(p); e != nil {
		p.refusedBy = StepSchema
		return e
	}
	if e := in.route(p); e != nil {
		p.refusedBy = StepRoute
		return e
	}
	if p.dry {
		return nil
	}
	return in.admit(p)
}

// 1. envelope

// envelope checks the subject and header block, reads the envelope, and
// settles who the message is from: the sender's tenant and name stamped,
// its cancel token taken.
func (in *Ingress) envelope(p *publication, who api.Principal) *semaq.APIError {
	m := p.m
	if err := semaq.CheckPublishSubject(m.Subject); err != nil {
		return semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
	}
	if p.hdrErr != nil {
		return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: the header block is malformed (%v); nothing was stored", m.Subject, p.hdrErr)
	}
	env, err := semaq.Normalize(m.Header, p.received, in.opts)
	if err != nil {
		return semaq.NewAPIError(semaq.ErrEnvelope, "%s", err.Error())
	}
	p.env, p.who = env, who
	if e := in.hints(p); e != nil {
		return e
	}
	if who.Who == api.User {
		if e := stampTenant(p); e != nil {
			return e
		}
		p.tenant = p.env.Tenant
	}
	if e := takeOwnerHeaders(p); e != nil {
		return e
	}
	if !p.dry {
		p.obs.begin(in, m, p.env)
	}
	return nil
}

// stampTenant makes the tenant of p its publisher's (docs/security.md,
// Tenants), so every later step, the metrics and the stored message see
// it: a user with a tenant publishes for that tenant only, and a message
// naming no tenant gets the user's. Services and admins act for tenants:
// the tenant they name is kept.
func stampTenant(p *publication) *semaq.APIError {
	who, sent := p.who, p.env.Tenant
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
// A store user is stamped as the publisher.
func takeOwnerHeaders(p *publication) *semaq.APIError {
	h := p.m.Header
	for k, vs := range h {
		switch {
		case strings.EqualFold(k, semaq.HdrCancelSum), strings.EqualFold(k, semaq.HdrPublisher), strings.EqualFold(k, semaq.HdrModelRevision), isChainHeader(k):
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
	if p.who.Who == api.User {
		h.Set(semaq.HdrPublisher, p.who.User)
	}
	return nil
}

// isChainHeader reports whether name (any case) is a header of a session
// chain's links or head records, which the broker stamps (chain.go).
func isChainHeader(name string) bool {
	if provenance.IsChainHeader(name) {
		return true
	}
	return len(name) > len("AI-Chain-") && strings.EqualFold(name[:len("AI-Chain-")], "AI-Chain-")
}

// chainHeaderIn names a chain header of h, "" when it has none.
func chainHeaderIn(h nats.Header) string {
	for k := range h {
		if isChainHeader(k) {
			return k
		}
	}
	return ""
}

// 2. policy

// applyPolicy runs the policy steps on p, in order.
func (in *Ingress) applyPolicy(p *publication) *semaq.APIError {
	var pm *policy.Message
	for i := range in.policy {
		ps := &in.policy[i]
		if ps.idle != nil && ps.idle() {
			continue
		}
		if pm == nil {
			pm = &policy.Message{Principal: publicPrincipal(p.who), Stream: p.stream.name, Subject: p.m.Subject,
				Header: p.m.Header, Data: p.m.Data, Envelope: p.env}
		}
		ctx, sp := p.obs.child(in.tracing, "policy ", ps.name)
		if ctx == nil {
			ctx = p.ctx
		}
		if ctx == nil {
			ctx = context.Background()
		}
		v, err := ps.step.Apply(ctx, pm)
		e := in.verdict(p, pm, ps.name, v, err)
		if !p.dry {
			switch {
			case e != nil:
				ps.obs.Refused()
			case v == policy.Rewrite:
				ps.obs.Rewrote()
			default:
				ps.obs.Passed()
			}
		}
		endChild(sp, e)
		if e != nil {
			return e
		}
	}
	return nil
}

// verdict takes step name's answer on pm into p: a refusal as the
// publisher gets it, a rewrite with its envelope read again. A step may
// not change the headers the broker stamps for a store user, nor change
// the payload and say it passed.
func (in *Ingress) verdict(p *publication, pm *policy.Message, name string, v policy.Verdict, err error) *semaq.APIError {
	if err != nil {
		return policy.AsAPIError(name, p.m.Subject, err)
	}
	switch v {
	case policy.Pass:
		if len(pm.Data) != len(p.m.Data) || len(pm.Data) > 0 && &pm.Data[0] != &p.m.Data[0] {
			return semaq.NewAPIError(semaq.ErrPolicy, "policy %s changed the payload on %s but answered pass; a step that changes a message answers rewrite", name, p.m.Subject)
		}
	case policy.Rewrite:
		if pm.Header == nil {
			pm.Header = make(nats.Header)
		}
		p.m.Data, p.m.Header = pm.Data, pm.Header
		env, err := semaq.Normalize(pm.Header, p.received, semaq.NormalizeOptions{MaxHeaderBytes: in.opts.MaxHeaderBytes})
		if err != nil {
			return semaq.NewAPIError(semaq.ErrEnvelope, "policy %s left an invalid envelope on %s: %v", name, p.m.Subject, err)
		}
		p.env, pm.Envelope = env, env
	default:
		return semaq.NewAPIError(semaq.ErrPolicy, "policy %s answered %v on %s, which is neither pass nor rewrite", name, v, p.m.Subject)
	}
	return checkStamped(p, name)
}

// checkStamped refuses a message whose broker-stamped headers a policy
// step changed: a store user's AI-Tenant and AI-Publisher are the
// broker's word on who sent it, and AI-Cancel-Sum is added at the append.
func checkStamped(p *publication, name string) *semaq.APIError {
	h := p.m.Header
	changed := ""
	switch {
	case len(h[semaq.HdrCancelSum]) > 0:
		changed = semaq.HdrCancelSum
	case chainHeaderIn(h) != "":
		changed = chainHeaderIn(h)
	case p.who.Who != api.User:
		if len(h[semaq.HdrPublisher]) > 0 {
			changed = semaq.HdrPublisher
		}
	case !only(h[semaq.HdrPublisher], p.who.User):
		changed = semaq.HdrPublisher
	case !only(h[semaq.HdrTenant], p.tenant):
		changed = semaq.HdrTenant
	}
	if changed == "" {
		return nil
	}
	return semaq.NewAPIError(semaq.ErrPolicy, "policy %s changed %s on %s, which the broker stamps; a policy step may not", name, changed, p.m.Subject)
}

// only reports whether vs is the one value v, or empty for v "".
func only(vs []string, v string) bool {
	if v == "" {
		return len(vs) == 0
	}
	return len(vs) == 1 && vs[0] == v
}

// publicPrincipal is who as policy steps see it.
func publicPrincipal(who api.Principal) policy.Principal {
	switch who.Who {
	case api.User:
		return policy.Principal{Kind: policy.KindUser, User: who.User, Tenant: who.Tenant, Role: who.Role}
	case api.Node:
		return policy.Principal{Kind: policy.KindNode}
	}
	return policy.Principal{Kind: policy.KindAnonymous}
}

// 3. schema

// validate is schema-on-write, when the subject is bound.
func (in *Ingress) validate(p *publication) *semaq.APIError {
	if in.reg == nil {
		return nil
	}
	b, ok := in.reg.BindingFor(p.m.Subject)
	if !ok {
		return nil
	}
	_, sp := p.obs.child(in.tracing, "schema ", b.Subject)
	e := checkSchema(in.reg, b, p.m, p.env.SchemaID)
	if e == nil && sp.IsRecording() {
		if n, err := strconv.ParseInt(p.m.Header.Get(semaq.HdrSchemaID), 10, 64); err == nil {
			sp.SetAttributes(telemetry.AttrSchemaID.Int64(n))
		}
	}
	endChild(sp, e)
	return e
}

// 4. route

// route applies the route rules, when there are any.
func (in *Ingress) route(p *publication) *semaq.APIError {
	if in.routes == nil {
		return nil
	}
	rt := in.routes()
	if rt.Len() == 0 {
		return nil
	}
	_, sp := p.obs.child(in.tracing, "route ", p.m.Subject)
	e := in.routeRule(rt, p, sp)
	endChild(sp, e)
	return e
}

// routeRule applies the rules of rt to p: the first that matches picks
// the subject to store it under, and the served stream capturing that
// subject stores it. A routed message gets AI-Origin-Subject. A target no
// stream captures refuses the message. sp is the step's span.
func (in *Ingress) routeRule(rt *table.Table, p *publication, sp trace.Span) *semaq.APIError {
	m := p.m
	var r *table.Rule
	if p.dry {
		r, p.target = rt.Try(m)
	} else {
		r, p.target = rt.Match(m)
	}
	if r == nil {
		return nil
	}
	p.rule = r
	if sp.IsRecording() {
		sp.SetAttributes(telemetry.AttrRoute.String(r.Name()))
	}
	t := p.target
	ts := in.targetStream(t)
	if ts == nil {
		return semaq.NewAPIError(semaq.ErrNoStream,
			"route %s sends messages on %s to %s, which no stream captures; nothing was stored (add a stream for %s or change the route)",
			r.Name(), m.Subject, t.Subject(), t.Subject())
	}
	if !p.dry {
		r.Routed(t)
	}
	m.Header[semaq.HdrOriginSubject] = []string{m.Subject}
	origin := p.subject
	p.subject, p.stream = t.Subject(), ts
	if sp.IsRecording() {
		sp.SetAttributes(telemetry.AttrRouteTarget.String(tracevocab.ValidUTF8(p.subject)))
		if p.subject != origin {
			p.obs.span.SetAttributes(tracevocab.AttrOriginSubject.String(tracevocab.ValidUTF8(origin)),
				tracevocab.AttrMsgDest.String(tracevocab.ValidUTF8(p.subject)))
		}
	}
	return nil
}

// targetStream finds the served stream capturing a target, remembered on
// the target per snapshot of the served streams.
func (in *Ingress) targetStream(t *table.Target) *stream {
	served := in.served.list.Load()
	if v, ok := t.Lookup(served); ok {
		return v.(*stream)
	}
	st, _ := in.served.find(t.Subject())
	t.Remember(served, st)
	return st
}

// 5. admission

// admit checks the node's memory, binds a registered model's version
// (SetModels), then the quotas, then the admission
// control of the queue the message is for. A message the queue refuses
// gets its quota back.
func (in *Ingress) admit(p *publication) *semaq.APIError {
	if in.memory != nil {
		if e := in.memory(); e != nil {
			in.metrics.MemoryRefused()
			return e
		}
	}
	if p.env.Model != "" {
		if bind := in.models.Load(); bind != nil {
			if e := (*bind)(p.m, &p.env); e != nil {
				return e
			}
		}
	}
	var d Admitter // this node's dispatcher, or the node dispatching the queue
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
	// What p asks of the quotas: its tenant as the envelope step left it,
	// its user (auth on), and its prompt tokens as every other token
	// count of the broker reckons them.
	r := quota.Request{
		Tenant: p.env.Tenant,
		User:   p.who.User,
		Tokens: quota.RequestTokens(int64(p.env.PromptTokens), len(p.m.Data)),
		Queued: d != nil,
	}
	if ref := q.Admit(r); ref != nil {
		return in.quotaRefusal(ref)
	}
	if d != nil {
		if e := d.Admit(&p.env, len(p.m.Data)); e != nil {
			q.Refund(r)
			return e
		}
	}
	return nil
}

// quotaRefusal turns a quota's refusal into the ingress's: the overloaded
// error, naming the quota, whose it is and when to retry. Counted by
// tenant, quota and scope.
func (in *Ingress) quotaRefusal(ref *quota.Refusal) *semaq.APIError {
	in.metrics.QuotaRefused(ref.Tenant, string(ref.Kind), string(ref.Scope))
	e := semaq.NewAPIError(semaq.ErrOverloaded, "quota: %s", ref.Error())
	e.RetryAfterMs = quota.CeilMs(ref.RetryAfter).Milliseconds()
	e.Quota = string(ref.Kind)
	return e
}

// 6. append, or reject

// append publishes p into the storage namespace, with the reply subject
// acks.go picks.
func (in *Ingress) append(p *publication) *semaq.APIError {
	m := p.m
	p.obs.carry(m.Header)
	if p.cancel != "" && in.isQueue(p.stream.name) {
		m.Header.Set(semaq.HdrCancelSum, semaq.CancelSum(p.cancel))
	}
	reply := in.replyFor(p)
	if err := p.out.Publish(reserved.StoragePrefix+p.subject, reply, m.Header, m.Data); err != nil {
		in.ReplyDropped(m.Reply, reply)
		if errors.Is(err, nats.ErrMaxPayload) {
			return semaq.NewAPIError(semaq.ErrTooLarge, "message on %s is too large with its envelope: %d bytes of data, server limit %d",
				m.Subject, len(m.Data), p.out.MaxPayload())
		}
		return semaq.NewAPIError(semaq.ErrUnavailable, "storing message on %s: %v", m.Subject, err)
	}
	return nil
}

// isQueue reports whether stream is a work queue this node admits for.
func (in *Ingress) isQueue(stream string) bool {
	qs := in.queues.Load()
	return qs != nil && (*qs)[stream] != nil
}

// reject refuses p: counted, recorded on its span, and answered to the
// publisher with e.
func (in *Ingress) reject(p *publication, e *semaq.APIError) {
	m := p.m
	in.refused(p, e)
	if m.Reply == "" {
		in.log.Debug("rejected message without reply subject", "subject", m.Subject, "err", e.Description)
		return
	}
	_ = in.egress.Publish(m.Reply, semaq.MarshalError(e))
}

// refused counts p's refusal and records it on its span.
func (in *Ingress) refused(p *publication, e *semaq.APIError) {
	in.rejected.Add(1)
	p.obs.rejected(e)
}
