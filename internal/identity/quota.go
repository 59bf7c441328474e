package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

// SetQuota changes a user's own quotas (docs/quotas.md): a nil field keeps
// its value, 0 removes the limit. It returns once this node's snapshot
// shows the change, so the ingress charges the new quota from then on.
func (s *Store) SetQuota(ctx context.Context, r semaq.UserQuotaRequest) (*User, error) {
	if err := checkQuota(r); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "user quota: %v", err)
	}
	e, err := s.kv.Get(ctx, r.Name)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, semaq.NewAPIError(semaq.ErrUserNotFound, "user %q not found", r.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("identity: reading user %s: %w", r.Name, err)
	}
	var u User
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		return nil, fmt.Errorf("identity: user %s: %w", r.Name, err)
	}
	if r.RPM != nil {
		u.RPM = *r.RPM
	}
	if r.TPM != nil {
		u.TPM = *r.TPM
	}
	b, err := json.Marshal(&u)
	if err != nil {
		return nil, err
	}
	// On the revision read: a concurrent change fails this one rather than
	// being overwritten.
	rev, err := s.kv.Update(ctx, r.Name, b, e.Revision())
	if err != nil {
		return nil, fmt.Errorf("identity: storing user %s: %w", r.Name, err)
	}
	if _, err := s.state.WaitRev(ctx, rev); err != nil {
		return nil, fmt.Errorf("identity: waiting for user %s: %w", r.Name, err)
	}
	return &u, nil
}

// checkQuota checks a quota change; the error names the field at fault.
func checkQuota(r semaq.UserQuotaRequest) error {
	if err := checkName(r.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if r.RPM == nil && r.TPM == nil {
		return errors.New("nothing to change: give rpm, tpm or both")
	}
	if r.RPM != nil && *r.RPM < 0 {
		return fmt.Errorf("rpm: %d is negative", *r.RPM)
	}
	if r.TPM != nil && *r.TPM < 0 {
		return fmt.Errorf("tpm: %d is negative", *r.TPM)
	}
	return nil
}
