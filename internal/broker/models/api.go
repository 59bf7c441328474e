package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// Handlers serves $SQ.API.MODEL.*.
func (r *Registry) Handlers() api.Handlers {
	return api.Handlers{
		semaq.APIModelRegister: op(r, "register", r.register),
		semaq.APIModelPromote:  op(r, "promote", r.promote),
		semaq.APIModelRollback: op(r, "rollback", r.rollback),
		semaq.APIModelDrain:    op(r, "drain", r.drain),
		semaq.APIModelReport:   op(r, "report", r.report),
		semaq.APIModelGet:      op(r, "get", r.get),
		semaq.APIModelList:     op(r, "list", r.list),
	}
}

func op[Req any](r *Registry, name string, fn func(ctx context.Context, req *Req) (any, error)) nats.MsgHandler {
	return api.OpWithin(r.log, "model "+name, api.ChangeTimeout, func(ctx context.Context, req *Req) (any, error) {
		out, err := fn(ctx, req)
		r.deps.Metrics.ModelOp(name, result(err))
		return out, err
	}, nil)
}

func result(err error) string {
	var e *semaq.APIError
	switch {
	case err == nil:
		return "ok"
	case !errors.As(err, &e):
		return "error"
	case e.ErrCode == semaq.ErrCodeForbidden:
		return "forbidden"
	case e.ErrCode == semaq.ErrCodeModelGate:
		return "gate_refused"
	case e.ErrCode == semaq.ErrCodeModelNotFound:
		return "not_found"
	case e.ErrCode == semaq.ErrCodeModelConflict:
		return "conflict"
	case e.ErrCode == semaq.ErrCodeBadModel, e.ErrCode == semaq.ErrCodeBadRequest:
		return "bad"
	}
	return "error"
}

// Who may do what (docs/models.md, Rights): models are the node's, not a
// tenant's, so every user reads them; only admins change them; workers
// and services also report a version's figures.
type right int

const (
	read right = iota
	reportRight
	changeRight
)

// allow refuses a sender without the right, and names the sender for the
// history.
func (r *Registry) allow(ctx context.Context, need right, what string) (string, error) {
	if r.deps.Principal == nil {
		return "anonymous", nil
	}
	p := r.deps.Principal(api.RequestHeader(ctx))
	if p.Who != api.User {
		return string(p.Who), nil
	}
	switch {
	case need == read, p.Role == semaq.RoleAdmin:
	case need == reportRight && (p.Role == semaq.RoleWorker || p.Role == semaq.RoleService):
	case need == reportRight:
		return "", semaq.NewAPIError(semaq.ErrForbidden, "model %s: user %s (role %s) may not report figures; admins, services and workers may", what, p.User, p.Role)
	default:
		return "", semaq.NewAPIError(semaq.ErrForbidden, "model %s: user %s (role %s) may read the registry, not change it; only admins may", what, p.User, p.Role)
	}
	return p.User, nil
}

func bad(format string, args ...any) error {
	return semaq.NewAPIError(semaq.ErrBadModel, format, args...)
}

func (r *Registry) register(ctx context.Context, req *semaq.ModelRegisterRequest) (out any, err error) {
	by, err := r.allow(ctx, changeRight, "register")
	if err != nil {
		return nil, err
	}
	if err := semaq.CheckModelRef(req.ModelRef, true); err != nil {
		return nil, bad("model register: %v", err)
	}
	if len(req.Labels) > semaq.MaxModelLabels {
		return nil, bad("model register: %d labels, at most %d", len(req.Labels), semaq.MaxModelLabels)
	}
	for k, v := range req.Labels {
		if err := semaq.CheckModelVersion(k); err != nil || len(v) > 256 || strings.ContainsAny(v, "\r\n\x00") {
			return nil, bad("model register: label %q=%q: a name of letters, digits, '.', '_', '-' and a value of one line up to 256 bytes", k, v)
		}
	}
	if req.Gate != nil {
		if err := semaq.CheckModelGate(*req.Gate); err != nil {
			return nil, bad("model register: gate: %v", err)
		}
	}
	defer r.deps.Audit(ctx, semaq.AuditOpModelRegister, req.Model+" "+req.Version)(&out, &err)
	info, _, err := r.update(ctx, req.Model, true, func(m *semaq.ModelInfo) (*semaq.ModelInfo, change, error) {
		return register(m, req, by, r.deps.Now())
	})
	return info, err
}

func (r *Registry) promote(ctx context.Context, req *semaq.ModelPromoteRequest) (out any, err error) {
	by, err := r.allow(ctx, changeRight, "promote")
	if err != nil {
		return nil, err
	}
	if err := semaq.CheckModelRef(req.ModelRef, true); err != nil {
		return nil, bad("model promote: %v", err)
	}
	if req.CanaryPercent < 0 || req.CanaryPercent >= 100 || req.CanaryPercent != req.CanaryPercent {
		return nil, bad("model promote: canary %v%%: more than 0 and less than 100, or 0 for all traffic", req.CanaryPercent)
	}
	if req.Sticky != "" && req.Sticky != "session" && req.Sticky != "tenant" {
		return nil, bad("model promote: sticky %q: session or tenant", req.Sticky)
	}
	target := fmt.Sprintf("%s %s", req.Model, req.Version)
	if req.CanaryPercent > 0 {
		target += fmt.Sprintf(" canary %g%%", req.CanaryPercent)
	}
	if req.Force {
		target += " forced"
	}
	defer r.deps.Audit(ctx, semaq.AuditOpModelPromote, target)(&out, &err)
	var refused *semaq.ModelGateResult
	info, _, err := r.update(ctx, req.Model, false, func(m *semaq.ModelInfo) (*semaq.ModelInfo, change, error) {
		var gate *semaq.ModelGateResult
		if req.CanaryPercent == 0 && m.Version(req.Version) != nil {
			gate = evaluate(m, req.Version)
			gate.Forced = !gate.Passed && req.Force
			if !gate.Passed && !req.Force {
				refused = gate
				return nil, change{}, gateError(m.Name, req.Version, gate)
			}
		}
		c, err := promote(m, req, gate, by, r.deps.Now())
		return m, c, err
	})
	if refused != nil {
		r.event(ctx, semaq.ModelEvent{Model: req.Model, Gate: refused, ModelChange: semaq.ModelChange{
			Event: semaq.ModelGateRefused, Version: req.Version, At: r.deps.Now(), By: by, Detail: gateDetail(refused)}}, "")
	}
	return info, err
}

// gateError is the gate's refusal, with its figures.
func gateError(model, version string, g *semaq.ModelGateResult) error {
	return semaq.NewAPIError(semaq.ErrModelGate, "model %s version %s: the promotion gate refused it: %s (--force promotes it anyway, audited)",
		model, version, gateDetail(g))
}

func (r *Registry) rollback(ctx context.Context, req *semaq.ModelRef) (out any, err error) {
	by, err := r.allow(ctx, changeRight, "rollback")
	if err != nil {
		return nil, err
	}
	if err := semaq.CheckModelRef(semaq.ModelRef{Model: req.Model}, false); err != nil {
		return nil, bad("model rollback: %v", err)
	}
	defer r.deps.Audit(ctx, semaq.AuditOpModelRollback, req.Model)(&out, &err)
	info, _, err := r.update(ctx, req.Model, false, func(m *semaq.ModelInfo) (*semaq.ModelInfo, change, error) {
		c, err := rollback(m, by, r.deps.Now())
		return m, c, err
	})
	return info, err
}

// drainSettle is how long a drain that counts no request in flight waits
// to count again: a request stored just before every node applied the
// drain may not be in its dispatcher's index yet.
const drainSettle = 200 * time.Millisecond

// drain stops admission to a version and, once no request bound to it is
// queued or leased anywhere, retires it. It answers at once with how far
// it got: call it again until Done.
func (r *Registry) drain(ctx context.Context, req *semaq.ModelRef) (out any, err error) {
	by, err := r.allow(ctx, changeRight, "drain")
	if err != nil {
		return nil, err
	}
	if err := semaq.CheckModelRef(*req, true); err != nil {
		return nil, bad("model drain: %v", err)
	}
	defer r.deps.Audit(ctx, semaq.AuditOpModelDrain, req.Model+" "+req.Version)(&out, &err)
	info, _, err := r.update(ctx, req.Model, false, func(m *semaq.ModelInfo) (*semaq.ModelInfo, change, error) {
		c, err := drain(m, req.Version, by, r.deps.Now())
		return m, c, err
	})
	if err != nil {
		return nil, err
	}
	res := semaq.ModelDrainResponse{Model: req.Model, Version: req.Version, State: info.Version(req.Version).State}
	if res.State == semaq.ModelStateRetired {
		res.Done = true
		return res, nil
	}
	// Every node binds by the draining state from here on (update waited
	// for them): what is in flight is all there will be.
	for i := range 2 {
		if res.InFlight, err = r.deps.InFlight(ctx, req.Model, req.Version); err != nil || res.InFlight > 0 {
			return res, err
		}
		if i == 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(drainSettle):
			}
		}
	}
	info, _, err = r.update(ctx, req.Model, false, func(m *semaq.ModelInfo) (*semaq.ModelInfo, change, error) {
		if v := m.Version(req.Version); v != nil && v.State == semaq.ModelStateRetired {
			return m, change{}, nil
		}
		c, err := retire(m, req.Version, by, r.deps.Now())
		return m, c, err
	})
	if err != nil {
		return nil, err
	}
	res.State, res.Done = info.Version(req.Version).State, true
	return res, nil
}

func (r *Registry) report(ctx context.Context, req *semaq.ModelReportRequest) (out any, err error) {
	by, err := r.allow(ctx, reportRight, "report")
	if err != nil {
		return nil, err
	}
	if err := semaq.CheckModelRef(req.ModelRef, true); err != nil {
		return nil, bad("model report: %v", err)
	}
	if err := semaq.CheckModelFigures(req.ModelFigures); err != nil {
		return nil, bad("model report: %v", err)
	}
	defer r.deps.Audit(ctx, semaq.AuditOpModelReport, req.Model+" "+req.Version)(&out, &err)
	info, _, err := r.update(ctx, req.Model, false, func(m *semaq.ModelInfo) (*semaq.ModelInfo, change, error) {
		c, err := report(m, req, by, r.deps.Now())
		return m, c, err
	})
	return info, err
}

func (r *Registry) get(ctx context.Context, req *semaq.ModelRef) (any, error) {
	if _, err := r.allow(ctx, read, "get"); err != nil {
		return nil, err
	}
	if err := semaq.CheckModelRef(semaq.ModelRef{Model: req.Model}, false); err != nil {
		return nil, bad("model get: %v", err)
	}
	info := r.follow.Load().models[req.Model]
	if info == nil {
		return nil, semaq.NewAPIError(semaq.ErrModelNotFound, "model %s is not registered", req.Model)
	}
	return info, nil
}

func (r *Registry) list(ctx context.Context, _ *struct{}) (any, error) {
	if _, err := r.allow(ctx, read, "list"); err != nil {
		return nil, err
	}
	s := r.follow.Load()
	out := semaq.ModelListResponse{Models: make([]semaq.ModelInfo, 0, len(s.list)), Revision: s.Rev}
	for _, m := range s.list {
		m.History = nil // model get has it
		out.Models = append(out.Models, m)
	}
	return out, nil
}

// casAttempts bounds the compare-and-set retries of one change.
const casAttempts = 16

// update reads model name, applies fn and writes the result back by
// compare-and-set, retried when another writer came first. fn gets nil
// for a model not stored (only with create; otherwise not found). A change
// that makes no event writes nothing. After the write it waits for every
// node to apply it, then publishes the events and moves the sessions'
// dependency on a new active version.
func (r *Registry) update(ctx context.Context, name string, create bool, fn func(*semaq.ModelInfo) (*semaq.ModelInfo, change, error)) (*semaq.ModelInfo, change, error) {
	key := semaq.ModelToken(name)
	for attempt := 1; ; attempt++ {
		var cur *semaq.ModelInfo
		var rev uint64
		e, err := r.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if !create {
				return nil, change{}, semaq.NewAPIError(semaq.ErrModelNotFound, "model %s is not registered", name)
			}
			if len(r.follow.Load().list) >= semaq.MaxModels {
				return nil, change{}, bad("the registry holds %d models, its bound", semaq.MaxModels)
			}
		case err != nil:
			return nil, change{}, api.JSError(err, "reading model %s", name)
		default:
			cur = &semaq.ModelInfo{}
			if err := json.Unmarshal(e.Value(), cur); err != nil {
				return nil, change{}, fmt.Errorf("model %s: stored record: %w", name, err)
			}
			if cur.Name != name {
				return nil, change{}, bad("model %s: its key %s is taken by model %s; choose another name", name, key, cur.Name)
			}
			rev = e.Revision()
			cur.Revision = rev
		}
		next, c, err := fn(cur)
		if err != nil {
			return nil, c, err
		}
		if len(c.events) == 0 {
			return next, c, nil
		}
		data, err := json.Marshal(next)
		if err != nil {
			return nil, c, err
		}
		if len(data) > recordBytes {
			return nil, c, bad("model %s: its record would be %d bytes, over %d; drain and retire old versions", name, len(data), recordBytes)
		}
		if rev == 0 {
			rev, err = r.kv.Create(ctx, key, data)
		} else {
			rev, err = r.kv.Update(ctx, key, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) && attempt < casAttempts {
			continue
		}
		if err != nil {
			return nil, c, api.JSError(err, "writing model %s", name)
		}
		next.Revision = rev
		if err := r.WaitApplied(ctx, rev); err != nil {
			return nil, c, err
		}
		if r.deps.Applied != nil {
			r.deps.Applied(ctx, rev)
		}
		r.after(ctx, next, c)
		return next, c, nil
	}
}

// after publishes c's events and, when a version was deployed, moves the
// sessions' dependency "model:<name>".
func (r *Registry) after(ctx context.Context, m *semaq.ModelInfo, c change) {
	for i, ev := range c.events {
		r.event(ctx, semaq.ModelEvent{ModelChange: ev, Model: m.Name, Revision: m.Revision}, fmt.Sprintf("%s@%d.%d", semaq.ModelToken(m.Name), m.Revision, i))
		if ev.Event == semaq.ModelDeployed && r.deps.Moved != nil {
			name, version := m.Name, ev.Version
			r.deps.Gate.Go("sessions-moved", func(ctx context.Context) {
				ctx, cancel := context.WithTimeout(ctx, movedTimeout)
				defer cancel()
				if n, err := r.deps.Moved(ctx, "model:"+name, version); err != nil {
					r.log.Warn("model deployed; sessions depending on it not all degraded", "model", name, "version", version, "err", err)
				} else if n > 0 {
					r.log.Info("sessions degraded by a model version change", "model", name, "version", version, "sessions", n)
				}
			})
		}
	}
}

// movedTimeout bounds one dependency move over every session.
const movedTimeout = 5 * time.Minute

// event stores one lifecycle event; id dedups a retried publish.
func (r *Registry) event(ctx context.Context, ev semaq.ModelEvent, id string) {
	data, err := json.Marshal(ev)
	if err == nil {
		var opts []jetstream.PublishOpt
		if id != "" {
			opts = append(opts, jetstream.WithMsgID(id))
		}
		_, err = r.deps.JS.Publish(ctx, semaq.ModelEventSubject(ev.Model, ev.Event), data, opts...)
	}
	if err != nil {
		r.log.Warn("model lifecycle event not stored", "model", ev.Model, "event", ev.Event, "err", err)
	}
}

// queuedInFlight counts the requests bound to model's version that the
// queues hold, as their dispatchers report them ($SQ.API.QUEUE.INFO of
// every queue that stores a message: a work queue keeps a request until
// it is answered). A queue that does not answer fails the count: a drain
// never completes on a guess.
func (r *Registry) queuedInFlight(ctx context.Context, model, version string) (int, error) {
	key, n := semaq.ModelVersionKey(model, version), 0
	// The names come from the meta group, complete; a stream's info from
	// its leader, or an error (a listing of infos leaves out the streams
	// whose leaders were slow to answer).
	names := r.deps.JS.StreamNames(ctx)
	var all []string
	for name := range names.Name() {
		all = append(all, name)
	}
	if err := names.Err(); err != nil {
		return 0, api.JSError(err, "model drain: listing the queues")
	}
	for _, name := range all {
		st, err := r.deps.JS.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // deleted since
		}
		if err != nil {
			return 0, api.JSError(err, "model drain: stream %s", name)
		}
		si := st.CachedInfo()
		if si.Config.Metadata[semaq.MetadataQueue] == "" || si.State.Msgs == 0 {
			continue
		}
		msg, err := r.deps.Conn.RequestWithContext(ctx, fmt.Sprintf(semaq.APIQueueInfoT, si.Config.Name), nil)
		if err != nil {
			return 0, semaq.NewAPIError(semaq.ErrUnavailable, "model drain: queue %s: %v", si.Config.Name, err)
		}
		var out struct {
			semaq.QueueInfo
			Error *semaq.APIError `json:"error"`
		}
		if err := json.Unmarshal(msg.Data, &out); err != nil || out.Error != nil {
			return 0, semaq.NewAPIError(semaq.ErrUnavailable, "model drain: queue %s: %v%v", si.Config.Name, err, out.Error)
		}
		for _, g := range out.Status.ByVersion {
			if g.Key == key {
				n += g.Queued
			}
		}
	}
	return n, nil
}

// AuditRead is the model's record for an audit record's before and after
// (its history left out): target starts with the model's name.
func (r *Registry) AuditRead(ctx context.Context, target string) any {
	name, _, _ := strings.Cut(target, " ")
	e, err := r.kv.Get(ctx, semaq.ModelToken(name))
	if err != nil {
		return nil
	}
	var m semaq.ModelInfo
	if json.Unmarshal(e.Value(), &m) != nil || m.Name != name {
		return nil
	}
	m.History = nil
	return m
}
