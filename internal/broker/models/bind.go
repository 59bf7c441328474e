package models

import (
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/keyhash"
	"github.com/semaq/semaq/semaq"
)

// Bind is the ingress's admission step for a request naming a registered
// model (ingress.SetModels): with no AI-Model-Version it gets the version
// this node's snapshot picks (the canary for the sticky share, else the
// active version); a version it names must be one that admits requests
// (not draining or retired). Either way the request records the version
// and the snapshot's revision (AI-Model-Revision), so a switch splits the
// requests by revision: every one bound at or past the switch's revision
// has the new version. A model without an active version, or not
// registered, is not bound.
func (r *Registry) Bind(m *nats.Msg, env *semaq.Envelope) *semaq.APIError {
	if env.Model == "" {
		return nil
	}
	s := r.follow.Load()
	info := s.models[env.Model]
	if info == nil {
		return nil
	}
	v := env.ModelVersion
	if v != "" {
		mv := info.Version(v)
		switch {
		case mv == nil:
			return semaq.NewAPIError(semaq.ErrModelNotFound, "publish on %s: model %s has no version %s (semaq model ls)", m.Subject, env.Model, v)
		case mv.State == semaq.ModelStateDraining || mv.State == semaq.ModelStateRetired:
			return semaq.NewAPIError(semaq.ErrModelDraining, "publish on %s: model %s version %s is %s and admits no request; leave %s out to get the active version",
				m.Subject, env.Model, v, mv.State, semaq.HdrModelVersion)
		}
	} else if v = pick(info, env); v == "" {
		return nil
	}
	m.Header[semaq.HdrModelVersion] = []string{v}
	m.Header[semaq.HdrModelRevision] = []string{strconv.FormatUint(s.Rev, 10)}
	env.ModelVersion = v
	r.deps.Metrics.ModelBound(env.Model, v)
	return nil
}

// pick is the version a request without one gets: the canary when its
// sticky key falls in the canary's share, else the active version.
func pick(info *semaq.ModelInfo, env *semaq.Envelope) string {
	if info.Canary != "" && info.CanaryPercent > 0 {
		if key, ok := stickyKey(info.Sticky, env); ok && inCanary(info.Name, key, info.CanaryPercent) {
			return info.Canary
		}
	}
	return info.Active
}

// stickyKey is what keeps a request's split: its session (or, sticky by
// tenant or without a session, its tenant). A request with neither goes
// to the active version.
func stickyKey(sticky string, env *semaq.Envelope) (string, bool) {
	if sticky != "tenant" && env.Session != "" {
		return "s\x00" + env.Tenant + "\x00" + env.Session, true
	}
	if env.Tenant != "" {
		return "t\x00" + env.Tenant, true
	}
	return "", false
}

// canaryBuckets is the resolution of a share: 0.01 %.
const canaryBuckets = 10000

// inCanary reports whether key falls in the first percent of model's
// buckets: the same key always falls in the same bucket, and raising the
// share only adds keys.
func inCanary(model, key string, percent float64) bool {
	b := keyhash.Of(model+"\x00"+key) % canaryBuckets
	return float64(b) < percent*canaryBuckets/100
}

func sortModels(l []semaq.ModelInfo) {
	slices.SortFunc(l, func(a, b semaq.ModelInfo) int { return strings.Compare(a.Name, b.Name) })
}
