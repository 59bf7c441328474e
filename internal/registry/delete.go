package registry

import (
	"context"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
)

// Deletes follow Confluent: a soft delete hides versions from normal reads
// (their ids stay resolvable); a permanent delete removes versions that were
// soft-deleted first. A version a live schema references cannot be deleted.

// DeleteSubject soft-deletes every live version of subject (and drops the
// subject's compatibility setting, as Confluent does), or with permanent
// removes the versions, which must all be soft-deleted already. It returns
// the versions it deleted, ascending.
func (r *Registry) DeleteSubject(ctx context.Context, subject string, permanent bool) ([]int, error) {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	var done []int
	err := retryCAS(func() error {
		st, err := r.caughtUp(ctx)
		if err != nil {
			return err
		}
		s := st.subjects.at(subject)
		if s == nil && done == nil {
			return subjectNotFound(subject)
		}
		return r.deleteSubjectOnce(ctx, st, subject, s, permanent, &done)
	})
	if err != nil {
		return nil, err
	}
	if err := r.catchUp(ctx); err != nil {
		return nil, err
	}
	slices.Sort(done)
	return done, nil
}

// deleteSubjectOnce is one attempt of DeleteSubject (retryCAS). done
// collects deleted versions across attempts.
func (r *Registry) deleteSubjectOnce(ctx context.Context, st *state, subject string, s *subjectState, permanent bool, done *[]int) error {
	busy := func() error {
		return lost(errorf(CodeStore, "deleting subject '%s': too many concurrent changes", subject))
	}
	if !permanent {
		live := s.list(false)
		if len(live) == 0 {
			if *done != nil {
				return nil
			}
			return errorf(CodeSubjectSoftDeleted, "Subject '%s' was soft deleted.Set permanent=true to delete permanently", subject)
		}
		if err := st.checkReferrers(subject, live, func(u use) bool { return u.subject == subject }); err != nil {
			return err
		}
		for _, v := range live {
			rec := versionRecord{Subject: subject, Version: v.version, ID: v.id, Deleted: true}
			_, err := r.kv.Update(ctx, keyVersion(subject, v.version), marshal(rec), v.rev)
			if conflict(err) {
				return busy()
			}
			if err != nil {
				return storeErr("soft-deleting a version", err)
			}
			*done = append(*done, v.version)
		}
		if c, ok := st.configs[subject]; ok {
			err := r.kv.Purge(ctx, keyConfig(subject), jetstream.LastRevision(c.rev))
			if conflict(err) {
				return busy()
			}
			if err != nil {
				return storeErr("deleting the subject's compatibility", err)
			}
		}
		return nil
	}
	if s.hasLive() {
		return errorf(CodeSubjectNotSoftDeleted, "Subject '%s' was not deleted first before being permanently deleted", subject)
	}
	if s == nil {
		return nil
	}
	for _, v := range s.versions {
		err := r.kv.Purge(ctx, keyVersion(subject, v.version), jetstream.LastRevision(v.rev))
		if conflict(err) {
			return busy()
		}
		if err != nil {
			return storeErr("deleting a version", err)
		}
		*done = append(*done, v.version)
	}
	return nil
}

// DeleteVersion soft-deletes one version of subject ("latest": the newest
// live one), or with permanent removes one that was soft-deleted already
// ("latest": the newest). It returns the version number.
func (r *Registry) DeleteVersion(ctx context.Context, subject, ver string, permanent bool) (int, error) {
	n, err := parseVersion(ver)
	if err != nil {
		return 0, err
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	var deleted int
	err = retryCAS(func() (err error) {
		deleted, err = r.deleteVersionOnce(ctx, subject, n, permanent)
		return err
	})
	return deleted, err
}

// deleteVersionOnce is one attempt of DeleteVersion (retryCAS), of
// version n (-1: latest).
func (r *Registry) deleteVersionOnce(ctx context.Context, subject string, n int, permanent bool) (int, error) {
	st, err := r.caughtUp(ctx)
	if err != nil {
		return 0, err
	}
	s, err := st.subject(subject, true)
	if err != nil {
		return 0, err
	}
	var v version
	if n == -1 {
		ok := false
		if v, ok = s.latest(permanent); !ok {
			v, _ = s.latest(true)
		}
	} else if v, err = s.find(n, true); err != nil {
		return 0, err
	}
	key := keyVersion(subject, v.version)
	if !permanent {
		if v.deleted {
			return 0, errorf(CodeVersionSoftDeleted, "Subject '%s' Version %d was soft deleted.Set permanent=true to delete permanently", subject, v.version)
		}
		if err := st.checkReferrers(subject, []version{v}, func(u use) bool { return u.subject == subject && u.version.version == v.version }); err != nil {
			return 0, err
		}
		rec := versionRecord{Subject: subject, Version: v.version, ID: v.id, Deleted: true}
		rev, err := r.kv.Update(ctx, key, marshal(rec), v.rev)
		if err != nil {
			return 0, casErr("soft-deleting the version", err)
		}
		return v.version, r.waitRev(ctx, rev)
	}
	if !v.deleted {
		return 0, errorf(CodeVersionNotSoftDeleted, "Subject '%s' Version %d was not deleted first before being permanently deleted", subject, v.version)
	}
	if err := r.kv.Purge(ctx, key, jetstream.LastRevision(v.rev)); err != nil {
		return 0, casErr("deleting the version", err)
	}
	return v.version, r.catchUp(ctx)
}

// checkReferrers refuses to delete versions that a live schema references,
// unless every live use of that schema is being deleted too.
func (st *state) checkReferrers(subject string, versions []version, deleting func(use) bool) error {
	for _, v := range versions {
		for _, id := range st.referencedBy(subject, v.version) {
			if slices.ContainsFunc(st.uses.at(id), func(u use) bool { return !u.deleted && !deleting(u) }) {
				return errorf(CodeReferenceExists, "One or more references exist to the schema {subject=%s,version=%d}: schema %d references it", subject, v.version, id)
			}
		}
	}
	return nil
}
