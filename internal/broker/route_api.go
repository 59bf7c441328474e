package broker

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
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// routeHandlers serves the route rules on $SQ.API.ROUTE.*.
func (s *Server) routeHandlers() map[string]nats.MsgHandler {
	return map[string]nats.MsgHandler{
		semaq.APIRouteAdd:    routeOp(s, "add", s.routeAdd),
		semaq.APIRouteList:   routeOp(s, "list", s.routeList),
		semaq.APIRouteDelete: routeOp(s, "delete", s.routeDelete),
		semaq.APIRouteTest:   routeOp(s, "test", s.routeTest),
	}
}

// routeOp adapts one route operation to a NATS handler, as dlqOp does.
func routeOp[Req any](s *Server, name string, op func(ctx context.Context, rt *router, req *Req) (any, error)) nats.MsgHandler {
	return api.Op(s.log, "route "+name, func(ctx context.Context, req *Req) (any, error) {
		if s.routes == nil {
			return nil, semaq.NewAPIError(semaq.ErrUnavailable, "route rules not loaded")
		}
		return op(ctx, s.routes, req)
	}, api.Error("route "+name))
}

func badRoute(name string, err error) *semaq.APIError {
	return semaq.NewAPIError(semaq.ErrBadRoute, "route %s: %v", name, err)
}

func (s *Server) routeAdd(ctx context.Context, rt *router, req *semaq.RouteAddRequest) (any, error) {
	d := req.Route
	r, err := compileRule(rt.env, d)
	if err != nil {
		return nil, badRoute(d.Name, err)
	}
	for _, t := range r.to {
		names, err := s.streamsCapturing(ctx, t.subject)
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
	loaded := t.find(d.Name)
	if loaded == nil || loaded.rev < rev {
		// Someone deleted it already; report what was stored.
		return semaq.RouteInfo{Route: d, Revision: rev, Created: time.Now().UTC()}, nil
	}
	s.log.Info("route added", "route", d.Name, "rule", routeSummary(&d), "revision", rev)
	return ruleInfo(loaded), nil
}

func (s *Server) routeList(_ context.Context, rt *router, _ *struct{}) (any, error) {
	t := rt.table.Load()
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

func (s *Server) routeDelete(ctx context.Context, rt *router, req *semaq.RouteDeleteRequest) (any, error) {
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
	s.log.Info("route removed", "route", req.Name)
	return semaq.RouteDeleteResponse{Success: true}, nil
}

// routeTest runs the ingress's checks and routing on a message without
// storing it or counting it.
func (s *Server) routeTest(_ context.Context, rt *router, req *semaq.RouteTestRequest) (any, error) {
	if err := checkSubject(req.Subject, false); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "route test: %v", err)
	}
	m := &nats.Msg{Subject: req.Subject, Header: make(nats.Header, len(req.Headers)+2), Data: req.Data}
	for k, vs := range req.Headers {
		m.Header[k] = slices.Clone(vs)
	}
	out := semaq.RouteTestResponse{Subject: req.Subject, Target: req.Subject, Trials: []semaq.RouteTrial{}}
	env, err := semaq.Normalize(m.Header, time.Now(), s.ingress.opts)
	if err != nil {
		out.Refused = err.Error()
		return out, nil
	}
	if s.reg != nil {
		if e := checkSchema(s.reg, m, env.SchemaID); e != nil {
			out.Refused = e.Description
			return out, nil
		}
	}
	t := rt.table.Load()
	// Loaded and unloadable rules, in the order the ingress tries them.
	type entry struct {
		r *rule
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
		case !subjectMatches(e.d.Subject, m.Subject):
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
	if st := s.ingress.streamFor(out.Target); st != nil {
		out.Stream = st.name
	} else if out.Route != "" {
		out.Refused = fmt.Sprintf("route %s sends messages on %s to %s, which no stream captures", out.Route, out.Subject, out.Target)
	} else {
		out.Refused = fmt.Sprintf("no stream captures subject %s", out.Subject)
	}
	return out, nil
}

// judgeTrial evaluates one rule for a dry run, recording a match in out.
func judgeTrial(r *rule, em expr.Message, out *semaq.RouteTestResponse) (result, reason string) {
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

// streamsCapturing names the SemaQ streams that capture a public subject,
// as $SQ.API.STREAM.LOOKUP finds them.
func (s *Server) streamsCapturing(ctx context.Context, subject string) ([]string, error) {
	var names []string
	lister := s.js.StreamNames(ctx, jetstream.WithStreamListSubject(semaq.StoragePrefix+subject))
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		return nil, api.JSError(err, "looking up the stream of %s", subject)
	}
	return names, nil
}

// ruleInfo describes a loaded rule with this node's counters.
func ruleInfo(r *rule) semaq.RouteInfo {
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
