package registry

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Reads answer from the in-memory snapshot: they never block and never
// touch the network. ctx is there for symmetry with the writes.

// parseVersion reads a version as Confluent's API spells it: "latest" or
// -1 (returned as -1), or 1 to 2^31-1.
func parseVersion(s string) (int, error) {
	if strings.EqualFold(s, "latest") {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n == 0 || n < -1 || n > math.MaxInt32 {
		return 0, errorf(CodeInvalidVersion,
			"The specified version '%s' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"", s)
	}
	return n, nil
}

// version describes version v of subject.
func (st *state) version(subject string, v version) *Version {
	out := &Version{Subject: subject, Version: v.version, ID: v.id, Deleted: v.deleted}
	if e := st.entries.at(v.id); e != nil {
		out.SchemaType, out.Schema, out.References = e.SchemaType, e.Schema, e.References
	}
	return out
}

// Subjects lists the subjects with a live version (with deleted, also
// those whose versions are all soft-deleted) that start with prefix,
// sorted.
func (r *Registry) Subjects(ctx context.Context, prefix string, deleted bool) []string {
	st := r.state.Load()
	out := []string{}
	for name, s := range st.subjects.all() {
		if strings.HasPrefix(name, prefix) && (deleted || s.hasLive()) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// subject returns a subject that exists for the caller: it has a live
// version, or any version when deleted.
func (st *state) subject(name string, deleted bool) (*subjectState, error) {
	s := st.subjects.at(name)
	if s == nil || (!deleted && !s.hasLive()) {
		return nil, subjectNotFound(name)
	}
	return s, nil
}

// Versions lists the subject's version numbers, ascending; deleted
// includes soft-deleted ones.
func (r *Registry) Versions(ctx context.Context, subject string, deleted bool) ([]int, error) {
	s, err := r.state.Load().subject(subject, deleted)
	if err != nil {
		return nil, err
	}
	vs := s.list(deleted)
	out := make([]int, len(vs))
	for i, v := range vs {
		out[i] = v.version
	}
	return out, nil
}

// Version returns one version of subject: "latest" or "-1" for the newest,
// or a number. deleted makes soft-deleted versions visible.
func (r *Registry) Version(ctx context.Context, subject string, ver string, deleted bool) (*Version, error) {
	n, err := parseVersion(ver)
	if err != nil {
		return nil, err
	}
	st := r.state.Load()
	s, err := st.subject(subject, deleted)
	if err != nil {
		return nil, err
	}
	v, err := s.find(n, deleted)
	if err != nil {
		return nil, err
	}
	return st.version(subject, v), nil
}

// find returns version n (-1: the newest); deleted makes soft-deleted ones
// visible.
func (s *subjectState) find(n int, deleted bool) (version, error) {
	if n == -1 {
		v, ok := s.latest(deleted)
		if !ok {
			return version{}, errorf(CodeVersionNotFound, "Version latest not found.")
		}
		return v, nil
	}
	v, ok := s.get(n)
	if !ok || (v.deleted && !deleted) {
		return version{}, versionNotFound(n)
	}
	return v, nil
}

// SchemaByID returns the schema with the global id, while some version
// (live or soft-deleted) uses it.
func (r *Registry) SchemaByID(ctx context.Context, id int) (*Entry, error) {
	e, ok := r.state.Load().visible(id)
	if !ok {
		return nil, schemaNotFound(id)
	}
	return e, nil
}

// SubjectVersionsByID lists the live versions that use the schema id,
// ordered by subject and version.
func (r *Registry) SubjectVersionsByID(ctx context.Context, id int) ([]SubjectVersion, error) {
	return r.subjectVersionsByID(id, false)
}

func (r *Registry) subjectVersionsByID(id int, deleted bool) ([]SubjectVersion, error) {
	st := r.state.Load()
	if _, ok := st.visible(id); !ok {
		return nil, schemaNotFound(id)
	}
	out := []SubjectVersion{}
	for _, u := range st.uses.at(id) {
		if deleted || !u.deleted {
			out = append(out, SubjectVersion{Subject: u.subject, Version: u.version.version})
		}
	}
	return out, nil
}

// ReferencedBy lists the ids of live schemas that reference the subject
// version, ascending.
func (r *Registry) ReferencedBy(ctx context.Context, subject, ver string) ([]int, error) {
	n, err := parseVersion(ver)
	if err != nil {
		return nil, err
	}
	st := r.state.Load()
	s, err := st.subject(subject, false)
	if err != nil {
		return nil, err
	}
	v, err := s.find(n, false)
	if err != nil {
		return nil, err
	}
	out := st.referencedBy(subject, v.version)
	if out == nil {
		out = []int{}
	}
	return out, nil
}

// Latest returns the newest live version of subject and its number. It
// is lock-free, for the ingress hot path.
func (r *Registry) Latest(subject string) (*Entry, int, bool) {
	st := r.state.Load()
	v, ok := st.subjects.at(subject).latest(false)
	if !ok {
		return nil, 0, false
	}
	e := st.entries.at(v.id)
	return e, v.version, e != nil
}

// Cached returns the schema with the global id, as SchemaByID does,
// lock-free.
func (r *Registry) Cached(id int) (*Entry, bool) {
	return r.state.Load().visible(id)
}

// SubjectHasID reports whether id is the schema of a live version of
// subject. Lock-free.
func (r *Registry) SubjectHasID(subject string, id int) bool {
	for _, u := range r.state.Load().uses.at(id) {
		if u.subject == subject && !u.deleted {
			return true
		}
	}
	return false
}
