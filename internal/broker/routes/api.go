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
	r, err := compileRule(rt.env, d)
	if err != nil {
		return nil, badRoute(d.Name, err)
	}
	for _, t := range r.to {
		names, err := rt.deps.StreamsCapturing(ctx, t.subject)
		if err != nil {
			return nil, err
		}
		if len(names) == 0 {
			return nil, badRoute(d.Name, fmt.Errorf("no stream captures target subject %s; add a stream for it first", t.subject))
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
	loaded := t.find(d.Name)
	if loaded == nil || loaded.rev < rev {
		// Someone deleted it already; report what was stored.
		return semaq.RouteInfo{Route: d, Revision: rev, Created: time.Now().UTC()}, nil
	}
	rt.log.Info("route added", "route", d.Name, "rule", routeSummary(&d), "revision", rev)
	return ruleInfo(loaded), nil
}

func (rt *Router) list(_ context.Context, _ *struct{}) (any, error) {
	t := rt.Table()
	out := semaq.RouteListResponse{Routes: make([]semaq.RouteInfo, 0, len(t.rules)+len(t.broken))}
	for _, r := range t.rules {
		out.Routes = append(out.Routes, ruleInfo(r))
	}
	for _, b := range t.broken {
		out.Routes = append(out.Routes, semaq.RouteInfo{Route: b.def, Created: b.created, Revision: b.rev, Error: b.err})
	}
	slices.SortStableFunc(out.Routes, func(a, b semaq.RouteInfo) int { return ruleLess(a.Order, a.Name, b.Order, b.Name) })
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

// routeTest runs the ingress's checks and routing on a message without
// storing it or counting it.
func (rt *Router) test(_ context.Context, req *semaq.RouteTestRequest) (any, error) {
	if err := semaq.CheckSubject(req.Subject, false); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "route test: %v", err)
	}
	m := &nats.Msg{Subject: req.Subject, Header: make(nats.Header, len(req.Headers)+2), Data: req.Data}
	for k, vs := range req.Headers {
		m.Header[k] = slices.Clone(vs)
	}
	out := semaq.RouteTestResponse{Subject: req.Subject, Target: req.Subject, Trials: []semaq.RouteTrial{}}
	if rt.deps.Check != nil {
		if refused := rt.deps.Check(m); refused != "" {
			out.Refused = refused
			return out, nil
		}
	}
	t := rt.Table()
	// Loaded and unloadable rules, in the order the ingress tries them.
	type entry struct {
		r *Rule
		b *brokenRule
		d *semaq.Route
	}
	all := make([]entry, 0, len(t.rules)+len(t.broken))
	for _, r := range t.rules {
		all = append(all, entry{r: r, d: &r.def})
	}
	for _, b := range t.broken {
		all = append(all, entry{b: b, d: &b.def})
	}
	slices.SortStableFunc(all, func(a, b entry) int { return ruleLess(a.d.Order, a.d.Name, b.d.Order, b.d.Name) })
	em := expr.Message{Subject: m.Subject, Header: m.Header, Data: m.Data}
	trials := make([]semaq.RouteTrial, 0, len(all))
	for _, e := range all {
		tr := semaq.RouteTrial{Name: e.d.Name, Subject: e.d.Subject, Order: e.d.Order}
		switch {
		case e.b != nil:
			tr.Result, tr.Reason = semaq.RouteResultNotLoaded, e.b.err
		case !subjects.Match(e.d.Subject, m.Subject):
			tr.Result, tr.Reason = semaq.RouteResultOtherSubject, fmt.Sprintf("%s does not match %s", m.Subject, e.d.Subject)
		default:
			tr.Result, tr.Reason = judgeTrial(e.r, em, &out)
		}
		trials = append(trials, tr)
		if out.Route != "" {
			break
		}
	}
	out.Trials = trials
	if name := rt.deps.StreamFor(out.Target); name != "" {
		out.Stream = name
	} else if out.Route != "" {
		out.Refused = fmt.Sprintf("route %s sends messages on %s to %s, which no stream captures", out.Route, out.Subject, out.Target)
	} else {
		out.Refused = fmt.Sprintf("no stream captures subject %s", out.Subject)
	}
	return out, nil
}

// judgeTrial evaluates one rule for a dry run, recording a match in out.
func judgeTrial(r *Rule, em expr.Message, out *semaq.RouteTestResponse) (result, reason string) {
	target, key, err := r.judge(em)
	switch {
	case err != nil:
		return semaq.RouteResultError, err.Error()
	case target == nil:
		return semaq.RouteResultFalse, "when is false: " + r.def.When
	}
	out.Route, out.Target, out.Key = r.def.Name, target.subject, key
	switch {
	case len(r.to) == 1:
		return semaq.RouteResultMatched, "to " + target.subject
	case r.key != nil:
		return semaq.RouteResultMatched, fmt.Sprintf("split: sticky key %q picks %s (weight %d of %d)", key, target.subject, target.weight, r.total)
	default:
		out.Random = true
		return semaq.RouteResultMatched, fmt.Sprintf("split at random: picked %s this time (weight %d of %d)", target.subject, target.weight, r.total)
	}
}

// ruleInfo describes a loaded rule with this node's counters.
func ruleInfo(r *Rule) semaq.RouteInfo {
	info := semaq.RouteInfo{
		Route:    r.def,
		Created:  r.created,
		Revision: r.rev,
		Stats:    semaq.RouteStats{Matched: r.matched.Load(), Errors: r.errs.Load()},
		Health:   adaptiveHealth(r),
	}
	if p := r.lastErr.Load(); p != nil {
		info.Stats.LastError = *p
	}
	if len(r.to) > 1 {
		info.Stats.Targets = make(map[string]uint64, len(r.to))
		for _, t := range r.to {
			info.Stats.Targets[t.subject] = t.matched.Load()
		}
	}
	return info
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
