package models

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/semaq/semaq/semaq"
)

// The lifecycle as pure functions of a model's record: each change takes
// the record as read, changes it and names the events it makes, or
// refuses; the caller writes it back by compare-and-set. docs/models.md
// draws it:
//
//	registered --promote --canary N%--> canary --promote--> active
//	registered --promote--------------------------------> active
//	active     --another version promoted, rollback-----> draining
//	canary     --rollback--------------------------------> draining
//	draining   --rollback to it (the previous active)---> active
//	any but active --drain, once nothing is in flight---> retired

// change is one step's outcome: the events to publish, in order.
type change struct {
	events []semaq.ModelChange
}

func (c *change) add(ev string, v *semaq.ModelVersion, to semaq.ModelState, by, detail string, now time.Time) {
	mc := semaq.ModelChange{Event: ev, At: now, By: by, Detail: detail}
	if v != nil {
		mc.Version, mc.From, mc.To = v.Version, v.State, to
		v.State = to
	}
	c.events = append(c.events, mc)
}

// record appends c's events to m's history, keeping the newest
// MaxModelHistory.
func (c *change) record(m *semaq.ModelInfo) {
	m.History = append(m.History, c.events...)
	if n := len(m.History) - semaq.MaxModelHistory; n > 0 {
		m.History = slices.Delete(m.History, 0, n)
	}
}

func conflict(format string, args ...any) error {
	return semaq.NewAPIError(semaq.ErrModelConflict, format, args...)
}

func notFound(model, version string) error {
	return semaq.NewAPIError(semaq.ErrModelNotFound, "model %s has no version %s", model, version)
}

// register adds version v to m (nil: a new model).
func register(m *semaq.ModelInfo, req *semaq.ModelRegisterRequest, by string, now time.Time) (*semaq.ModelInfo, change, error) {
	var c change
	if m == nil {
		m = &semaq.ModelInfo{Name: req.Model, Versions: []semaq.ModelVersion{}}
	}
	if req.Gate != nil {
		m.Gate = *req.Gate
	}
	if m.Version(req.Version) != nil {
		if req.Gate == nil && len(req.Labels) == 0 {
			return nil, c, conflict("model %s already has version %s", req.Model, req.Version)
		}
		v := m.Version(req.Version)
		if len(req.Labels) > 0 {
			v.Labels = maps.Clone(req.Labels)
		}
		c.add(semaq.ModelRegistered, v, v.State, by, "labels or gate updated", now)
		c.record(m)
		return m, c, nil
	}
	if len(m.Versions) >= semaq.MaxModelVersions {
		// Make room by forgetting the oldest retired version.
		i := slices.IndexFunc(m.Versions, func(v semaq.ModelVersion) bool { return v.State == semaq.ModelStateRetired })
		if i < 0 {
			return nil, c, semaq.NewAPIError(semaq.ErrBadModel, "model %s has %d versions, none retired: drain one first", req.Model, len(m.Versions))
		}
		m.Versions = slices.Delete(m.Versions, i, i+1)
	}
	m.Versions = append(m.Versions, semaq.ModelVersion{Version: req.Version, Labels: maps.Clone(req.Labels), RegisteredAt: now})
	v := &m.Versions[len(m.Versions)-1]
	c.add(semaq.ModelRegistered, v, semaq.ModelStateRegistered, by, "", now)
	c.record(m)
	return m, c, nil
}

// promote makes req.Version the canary of a share of the traffic, or the
// active version. gate is the verdict of the full promotion's gate (nil
// for a canary), which the caller computed with evaluate and which
// refuses unless it passed or was forced.
func promote(m *semaq.ModelInfo, req *semaq.ModelPromoteRequest, gate *semaq.ModelGateResult, by string, now time.Time) (change, error) {
	var c change
	v := m.Version(req.Version)
	if v == nil {
		return c, notFound(m.Name, req.Version)
	}
	switch v.State {
	case semaq.ModelStateRetired:
		return c, conflict("model %s version %s is retired; register a new version", m.Name, v.Version)
	case semaq.ModelStateActive:
		return c, conflict("model %s version %s is already active", m.Name, v.Version)
	}
	if req.CanaryPercent > 0 {
		if m.Active == "" {
			return c, conflict("model %s has no active version for a canary to share traffic with; promote %s without --canary", m.Name, v.Version)
		}
		if m.Canary != "" && m.Canary != v.Version {
			return c, conflict("model %s already has canary %s; promote or roll it back first", m.Name, m.Canary)
		}
		m.Canary, m.CanaryPercent, m.Sticky = v.Version, req.CanaryPercent, stickyOr(req.Sticky)
		c.add(semaq.ModelCanary, v, semaq.ModelStateCanary, by,
			strconv.FormatFloat(req.CanaryPercent, 'g', -1, 64)+"% sticky by "+m.Sticky, now)
		c.record(m)
		return c, nil
	}
	if m.Canary != "" && m.Canary != v.Version {
		return c, conflict("model %s has canary %s; promote or roll it back first", m.Name, m.Canary)
	}
	if gate != nil {
		ev, detail := semaq.ModelValidated, gateDetail(gate)
		if gate.Forced {
			detail = "forced past the gate: " + detail
		}
		c.add(ev, nil, "", by, detail, now)
		c.events[len(c.events)-1].Version = v.Version
	}
	if old := m.Version(m.Active); old != nil {
		c.add(semaq.ModelDrainStarted, old, semaq.ModelStateDraining, by, "replaced by "+v.Version, now)
		m.Previous = old.Version
	}
	m.Canary, m.CanaryPercent, m.Sticky = "", 0, ""
	m.Active = v.Version
	c.add(semaq.ModelDeployed, v, semaq.ModelStateActive, by, "", now)
	c.record(m)
	return c, nil
}

func stickyOr(s string) string {
	if s == "" {
		return "session"
	}
	return s
}

// rollback ends a canary (its version drains), or without one returns the
// traffic to the previous active version, which must not be retired.
func rollback(m *semaq.ModelInfo, by string, now time.Time) (change, error) {
	var c change
	if m.Canary != "" {
		v := m.Version(m.Canary)
		m.Canary, m.CanaryPercent, m.Sticky = "", 0, ""
		if v != nil {
			c.add(semaq.ModelRolledBack, v, semaq.ModelStateDraining, by, "canary ended; all traffic on "+m.Active, now)
		}
		c.record(m)
		return c, nil
	}
	prev := m.Version(m.Previous)
	if prev == nil || prev.State == semaq.ModelStateRetired {
		return c, conflict("model %s has no previous version to roll back to", m.Name)
	}
	cur := m.Version(m.Active)
	if cur != nil {
		c.add(semaq.ModelRolledBack, cur, semaq.ModelStateDraining, by, "back to "+prev.Version, now)
	}
	c.add(semaq.ModelDeployed, prev, semaq.ModelStateActive, by, "rollback", now)
	m.Active, m.Previous = prev.Version, ""
	if cur != nil {
		m.Previous = cur.Version
	}
	c.record(m)
	return c, nil
}

// drain stops admission to a version that is not the active one: a
// registered or canary version drains (a canary's share ends).
func drain(m *semaq.ModelInfo, version, by string, now time.Time) (change, error) {
	var c change
	v := m.Version(version)
	if v == nil {
		return c, notFound(m.Name, version)
	}
	switch v.State {
	case semaq.ModelStateActive:
		return c, conflict("model %s version %s is the active version: promote another, or roll back, before draining it", m.Name, version)
	case semaq.ModelStateDraining, semaq.ModelStateRetired:
		return c, nil
	}
	if m.Canary == version {
		m.Canary, m.CanaryPercent, m.Sticky = "", 0, ""
	}
	c.add(semaq.ModelDrainStarted, v, semaq.ModelStateDraining, by, "", now)
	c.record(m)
	return c, nil
}

// retire ends a drain whose requests are all answered.
func retire(m *semaq.ModelInfo, version, by string, now time.Time) (change, error) {
	var c change
	v := m.Version(version)
	if v == nil {
		return c, notFound(m.Name, version)
	}
	if v.State != semaq.ModelStateDraining {
		return c, conflict("model %s version %s is %s, not draining", m.Name, version, v.State)
	}
	if m.Previous == version {
		m.Previous = ""
	}
	c.add(semaq.ModelRetired, v, semaq.ModelStateRetired, by, "no request in flight", now)
	c.record(m)
	return c, nil
}

// report keeps a version's figures.
func report(m *semaq.ModelInfo, req *semaq.ModelReportRequest, by string, now time.Time) (change, error) {
	var c change
	v := m.Version(req.Version)
	if v == nil {
		return c, notFound(m.Name, req.Version)
	}
	f := req.ModelFigures
	v.Figures, v.ReportedAt = &f, now
	c.add(semaq.ModelReported, nil, "", by, fmt.Sprintf("p95 %gms, memory %gMB, cold start %gms", f.P95Ms, f.MemoryMB, f.ColdStartMs), now)
	c.events[0].Version = v.Version
	c.record(m)
	return c, nil
}
