package routes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/routes/table"
	"github.com/semaq/semaq/internal/broker/subjects"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// Handlers serves the route rules on $SQ.API.ROUTE.*.
func (rt *Router) Handlers() api.Handlers {
	return api.Handlers{
		semaq.APIRouteAdd:    api.Op(rt.log, "route add", rt.add, nil),
		semaq.APIRouteList:   api.Op(rt.log, "route list", rt.list, nil),
		semaq.APIRouteDelete: api.Op(rt.log, "route delete", rt.remove, nil),
		semaq.APIRouteTest:   api.Op(rt.log, "route test", rt.test, nil),
	}
}

func badRoute(name string, err error) *semaq.APIError {
	return semaq.NewAPIError(semaq.ErrBadRoute, "route %s: %v", name, err)
}

func (rt *Router) add(ctx context.Context, req *semaq.RouteAddRequest) (out any, err error) {
	defer rt.deps.Audit(ctx, semaq.AuditOpRouteAdd, req.Route.Name)(&out, &err)
	d := req.Route
	r, err := table.CompileRule(rt.env, d, 0, time.Time{})
	if err != nil {
		return nil, badRoute(d.Name, err)
	}
	for _, t := range r.Targets() {
		names, err := rt.deps.StreamsCapturing(ctx, t.Subject())
		if err != nil {
			return nil, err
		}
		if len(names) == 0 {
			return nil, badRoute(d.Name, fmt.Errorf("no stream captures target subject %s; add a stream for it first", t.Subject()))
		}
	}
	val, err := json.Marshal(d)
	if err != nil {
		return nil, badRoute(d.Name, err)
	}
	var rev uint64
	if req.Replace {
		rev, err = rt.kv.Put(ctx, d.Name, val)
	} else {
		rev, err = rt.kv.Create(ctx, d.Name, val)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, semaq.NewAPIError(semaq.ErrRouteExists, "route %s already exists; remove it first or replace it", d.Name)
		}
	}
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "route %s: storing: %v", d.Name, err)
	}
	t, err := rt.waitRev(ctx, rev)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "route %s stored but not yet in effect on this node: %v", d.Name, err)
	}
	rt.applied(ctx, rev)
	loaded := t.Find(d.Name)
	if loaded == nil || loaded.Rev() < rev {
		// Someone deleted it already; report what was stored.
		return semaq.RouteInfo{Route: d, Revision: rev, Created: time.Now().UTC()}, nil
	}
	rt.log.Info("route added", "route", d.Name, "rule", routeSummary(&d), "revision", rev)
	return ruleInfo(loaded), nil
}

func (rt *Router) list(_ context.Context, _ *struct{}) (any, error) {
	t := rt.Table()
	out := semaq.RouteListResponse{Routes: make([]semaq.RouteInfo, 0, t.Len()+len(t.Broken()))}
	for _, r := range t.Rules() {
		out.Routes = append(out.Routes, ruleInfo(r))
	}
	for _, b := range t.Broken() {
		out.Routes = append(out.Routes, semaq.RouteInfo{Route: b.Route, Created: b.Created, Revision: b.Rev, Error: b.Err})
	}
	slices.SortStableFunc(out.Routes, func(a, b semaq.RouteInfo) int { return table.Compare(&a.Route, &b.Route) })
	return out, nil
}

func (rt *Router) remove(ctx context.Context, req *semaq.RouteDeleteRequest) (out any, err error) {
	defer rt.deps.Audit(ctx, semaq.AuditOpRouteDelete, req.Name)(&out, &err)
	if err := semaq.CheckRouteName(req.Name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "route delete: %v", err)
	}
	if _, err := rt.kv.Get(ctx, req.Name); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, semaq.NewAPIError(semaq.ErrRouteNotFound, "route %s not found", req.Name)
		}
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "route %s: reading: %v", req.Name, err)
	}
	if err := rt.kv.Delete(ctx, req.Name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "route %s: deleting: %v", req.Name, err)
	}
	// Delete does not return its revision; the bucket's last one is at
	// least that.
	status, err := rt.kv.Status(ctx)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "route %s deleted; reading the bucket status: %v", req.Name, err)
	}
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "route %s deleted; unexpected bucket status %T", req.Name, status)
	}
	if _, err := rt.waitRev(ctx, bs.StreamInfo().State.LastSeq); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "route %s deleted but still in effect on this node: %v", req.Name, err)
	}
	rt.applied(ctx, bs.StreamInfo().State.LastSeq)
	rt.log.Info("route removed", "route", req.Name)
	return semaq.RouteDeleteResponse{Success: true}, nil
}

// test runs the ingress's pipeline on a message as a dry run (Deps.Check)
// and explains the route rules' part: every rule tried, in order, up to
// the one that matched.
func (rt *Router) test(ctx context.Context, req *semaq.RouteTestRequest) (any, error) {
	if err := semaq.CheckSubject(req.Subject, false); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "route test: %v", err)
	}
	m := &nats.Msg{Subject: req.Subject, Header: make(nats.Header, len(req.Headers)+2), Data: req.Data}
	for k, vs := range req.Headers {
		m.Header[k] = slices.Clone(vs)
	}
	if rt.deps.Check == nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "route test: this node has no ingress to try the message with")
	}
	c, refused, err := rt.deps.Check(ctx, m, req.As)
	if err != nil {
		return nil, err
	}
	out := semaq.RouteTestResponse{Subject: req.Subject, Target: req.Subject, Trials: []semaq.RouteTrial{}}
	if refused != nil {
		out.Refused, out.RefusedBy = refused.Description, c.RefusedBy
	}
	switch c.RefusedBy {
	case "", "route":
		out.Trials = rt.trials(m, c, &out)
	default:
		return out, nil // it never reached the rules
	}
	if refused == nil {
		out.Stream, out.Headers, out.Data = c.Stream, m.Header, m.Data
	}
	return out, nil
}

// trials judges the rules of the table in the order the ingress tries them,
// loaded and unloadable alike, on m as the pipeline left it, up to the one
// that matched (c.Rule), whose pick is the ingress's.
func (rt *Router) trials(m *nats.Msg, c Checked, out *semaq.RouteTestResponse) []semaq.RouteTrial {
	t := rt.Table()
	type entry struct {
		r *table.Rule
		b *table.Broken
		d semaq.Route
	}
	all := make([]entry, 0, t.Len()+len(t.Broken()))
	for _, r := range t.Rules() {
		all = append(all, entry{r: r, d: r.Route()})
	}
	for _, b := range t.Broken() {
		all = append(all, entry{b: b, d: b.Route})
	}
	slices.SortStableFunc(all, func(a, b entry) int { return table.Compare(&a.d, &b.d) })
	em := expr.Message{Subject: m.Subject, Header: m.Header, Data: m.Data}
	trials := make([]semaq.RouteTrial, 0, len(all))
	for _, e := range all {
		tr := semaq.RouteTrial{Name: e.d.Name, Subject: e.d.Subject, Order: e.d.Order}
		switch {
		case e.b != nil:
			tr.Result, tr.Reason = semaq.RouteResultNotLoaded, e.b.Err
		case !subjects.Match(e.d.Subject, m.Subject):
			tr.Result, tr.Reason = semaq.RouteResultOtherSubject, fmt.Sprintf("%s does not match %s", m.Subject, e.d.Subject)
		case c.Rule != nil && e.r.Name() == c.Rule.Name():
			tr.Result, tr.Reason = semaq.RouteResultMatched, matched(c.Rule, c.Target, em, out)
		default:
			tr.Result, tr.Reason = judgeTrial(e.r, em)
		}
		trials = append(trials, tr)
		if tr.Result == semaq.RouteResultMatched {
			break
		}
	}
	return trials
}

// judgeTrial evaluates a rule that did not match for a dry run: why not.
func judgeTrial(r *table.Rule, em expr.Message) (result, reason string) {
	tg, _, err := r.Judge(em)
	switch {
	case err != nil:
		return semaq.RouteResultError, err.Error()
	case tg == nil:
		return semaq.RouteResultFalse, "when is false: " + r.Route().When
	}
	// It matches now though the ingress's run found it did not (the
	// rules changed in between): say so rather than guess.
	return semaq.RouteResultFalse, "did not match when the message was tried (the rules changed since)"
}

// matched describes the ingress's pick tg of rule r for the message, and
// records it in out.
func matched(r *table.Rule, tg *table.Target, em expr.Message, out *semaq.RouteTestResponse) string {
	out.Route, out.Target = r.Name(), tg.Subject()
	var total uint64
	for _, t := range r.Targets() {
		total += t.Weight()
	}
	switch {
	case len(r.Targets()) == 1:
		return "to " + tg.Subject()
	case r.Route().StickyKey != "":
		out.Key, _ = r.StickyKey(em)
		return fmt.Sprintf("split: sticky key %q picks %s (weight %d of %d)", out.Key, tg.Subject(), tg.Weight(), total)
	default:
		out.Random = true
		return fmt.Sprintf("split at random: picked %s this time (weight %d of %d)", tg.Subject(), tg.Weight(), total)
	}
}

// ruleInfo describes a loaded rule with this node's counters.
func ruleInfo(r *table.Rule) semaq.RouteInfo {
	return semaq.RouteInfo{
		Route:    r.Route(),
		Created:  r.Created(),
		Revision: r.Rev(),
		Stats:    r.Stats(),
		Health:   adaptiveHealth(r),
	}
}

// routeSummary is a one-line description of a rule for logs and errors.
func routeSummary(d *semaq.Route) string {
	var b strings.Builder
	b.WriteString(d.Subject)
	if d.When != "" {
		b.WriteString(" when " + d.When)
	}
	if d.To != "" {
		b.WriteString(" -> " + d.To)
	}
	for i, s := range d.Split {
		if i == 0 {
			b.WriteString(" -> ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%d", s.Subject, s.Weight)
	}
	return b.String()
}

// AuditRead is a rule as an audit record shows it: its stored definition,
// nil when there is none.
func (rt *Router) AuditRead(ctx context.Context, name string) any {
	e, err := rt.kv.Get(ctx, name)
	if err != nil || !json.Valid(e.Value()) {
		return nil
	}
	return json.RawMessage(e.Value())
}
