package registry

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/schema"
)

// Compatibility is the mode Register applies to subject: its own setting,
// else the global one, else BACKWARD.
func (r *Registry) Compatibility(ctx context.Context, subject string) (schema.Mode, error) {
	return r.state.Load().compatibility(subject), nil
}

// SubjectCompatibility is the subject's own setting;
// ErrSubjectCompatNotConfigured when it has none.
func (r *Registry) SubjectCompatibility(ctx context.Context, subject string) (schema.Mode, error) {
	if c, ok := r.state.Load().configs[subject]; ok {
		return c.mode, nil
	}
	return "", errorf(CodeSubjectCompatNotConfigured, "Subject '%s' does not have subject-level compatibility configured", subject)
}

// ParseCompatibility reads a compatibility level as Confluent's API spells
// it (any case); ErrInvalidCompatibility otherwise.
func ParseCompatibility(s string) (schema.Mode, error) {
	m, err := schema.ParseMode(s)
	if err != nil {
		return "", errorf(CodeInvalidCompatibility,
			"Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive")
	}
	return m, nil
}

// SetCompatibility sets the mode of subject, or the global mode when
// subject is "". The subject need not exist yet.
func (r *Registry) SetCompatibility(ctx context.Context, subject string, m schema.Mode) error {
	m, err := ParseCompatibility(string(m))
	if err != nil {
		return err
	}
	if subject != "" {
		if err := checkSubject(subject); err != nil {
			return err
		}
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	rev, err := r.kv.Put(ctx, keyConfig(subject), marshal(configRecord{Compatibility: m}))
	if err != nil {
		return storeErr("storing the compatibility level", err)
	}
	return r.waitRev(ctx, rev)
}

// DeleteCompatibility removes the subject's own mode, so the global one
// applies (ErrSubjectNotFound when it has none, as in Confluent); with
// subject "" it resets the global mode to BACKWARD.
func (r *Registry) DeleteCompatibility(ctx context.Context, subject string) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if err := r.catchUp(ctx); err != nil {
		return err
	}
	st := r.state.Load()
	if subject == "" && st.global == nil {
		return nil
	}
	if _, ok := st.configs[subject]; subject != "" && !ok {
		return subjectNotFound(subject)
	}
	// Last writer wins, as with SetCompatibility; a delete of a key
	// deleted meanwhile is harmless.
	err := r.kv.Purge(ctx, keyConfig(subject))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return storeErr("deleting the compatibility level", err)
	}
	return r.catchUp(ctx)
}
