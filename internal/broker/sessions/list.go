package sessions

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

// ids lists the IDs of tenant's sessions, sorted, from the subjects the
// stream holds.
func (s *Store) ids(ctx context.Context, tenant string) ([]string, error) {
	prefix := subjectPrefix + semaq.TokenTenant(tenant) + "."
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(prefix+"*.doc"))
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		ids = append(ids, strings.TrimSuffix(strings.TrimPrefix(subj, prefix), ".doc"))
	}
	slices.Sort(ids)
	return ids, nil
}

func (s *Store) list(ctx context.Context, req *semaq.SessionListRequest) (any, error) {
	tenant, err := s.resolve(ctx, req.Tenant, read)
	if err != nil {
		return nil, err
	}
	switch req.State {
	case "", semaq.SessionActive, semaq.SessionStale, semaq.SessionDegraded:
	default:
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session list: state %q is not active, stale or degraded", req.State)
	}
	limit := req.Limit
	switch {
	case limit < 0:
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session list: limit %d is negative", limit)
	case limit == 0 || limit > semaq.SessionListMax:
		limit = semaq.SessionListMax
	}
	ids, err := s.ids(ctx, tenant)
	if err != nil {
		return nil, err
	}
	i, _ := slices.BinarySearch(ids, req.After)
	if i < len(ids) && ids[i] == req.After {
		i++
	}
	out := semaq.SessionListResponse{Sessions: []semaq.SessionInfo{}}
	now := s.now()
	// A filtered page reads at most SessionListMax documents: Next says
	// where the next page starts.
	for read := 0; i < len(ids); i++ {
		if len(out.Sessions) == limit || read == semaq.SessionListMax {
			out.More, out.Next = true, ids[i-1]
			break
		}
		read++
		k := key{tenant: tenant, id: ids[i]}
		st, err := s.load(ctx, k)
		if err != nil {
			return nil, err
		}
		if st.doc == nil {
			continue
		}
		d, ok := view(st.doc, now)
		if !ok || req.State != "" && d.State != req.State {
			continue
		}
		out.Sessions = append(out.Sessions, d.info(st.size))
	}
	return out, nil
}

func (s *Store) dependency(ctx context.Context, req *semaq.SessionDependencyRequest) (out any, err error) {
	tenant, err := s.resolve(ctx, req.Tenant, write)
	if err != nil {
		return nil, err
	}
	if err := semaq.CheckSessionDependency(req); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session dependency: %v", err)
	}
	defer s.deps.Audit(ctx, semaq.AuditOpSessionDependency, fmt.Sprintf("%s=%s tenant %s", req.Name, req.Version, semaq.TokenTenant(tenant)))(&out, &err)
	ids, err := s.ids(ctx, tenant)
	if err != nil {
		return nil, err
	}
	n := 0
	for _, id := range ids {
		k := key{tenant: tenant, id: id}
		moved := false
		_, err := s.apply(ctx, k, change{fn: func(d *doc, _ time.Time) (*semaq.SessionDelta, bool, error) {
			_, moved = dependencyMoved(&d.meta, req.Name, req.Version)
			return nil, moved, nil
		}})
		if err != nil && !isNotFound(err) {
			return nil, err
		}
		if err == nil && moved {
			n++
		}
	}
	return semaq.SessionDependencyResponse{Degraded: n}, nil
}

func isNotFound(err error) bool {
	ae, ok := err.(*semaq.APIError)
	return ok && ae.ErrCode == semaq.ErrCodeSessionNotFound
}

// DependencyMoved is a dependency move for every tenant's sessions: the
// model registry's, when a model's active version changes (dependency
// "model:<model>", docs/models.md). It counts the sessions degraded.
func (s *Store) DependencyMoved(ctx context.Context, name, version string) (int, error) {
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(subjectPrefix+"*.*.doc"))
	if err != nil {
		return 0, err
	}
	n := 0
	for subj := range info.State.Subjects {
		tenant, id, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(subj, subjectPrefix), ".doc"), ".")
		if !ok {
			continue
		}
		if tenant == semaq.TokenNoTenant {
			tenant = ""
		}
		moved := false
		_, err := s.apply(ctx, key{tenant: tenant, id: id}, change{fn: func(d *doc, _ time.Time) (*semaq.SessionDelta, bool, error) {
			_, moved = dependencyMoved(&d.meta, name, version)
			return nil, moved, nil
		}})
		if err != nil && !isNotFound(err) {
			return n, err
		}
		if err == nil && moved {
			n++
		}
	}
	return n, nil
}
