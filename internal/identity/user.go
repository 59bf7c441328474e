package identity

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/semaq/semaq/semaq"
)

// Bounds on what one user may hold: each grant becomes NATS permissions
// checked on every publish and subscribe of the user's connections.
const (
	maxNameLen = semaq.MaxNameLen
	maxGrants  = 64
)

// User is one stored identity: the value of its key in SQ_USERS.
type User struct {
	Name     string   `json:"name"`
	Tenant   string   `json:"tenant,omitempty"`
	Role     string   `json:"role"`
	Subjects []string `json:"subjects,omitempty"`
	Queues   []string `json:"queues,omitempty"`
	// RPM and TPM are the user's quotas (internal/broker/quota); 0: none.
	RPM     int64     `json:"rpm,omitempty"`
	TPM     int64     `json:"tpm,omitempty"`
	Created time.Time `json:"created"`
	Keys    []UserKey `json:"keys"`
	// Nkey is the public nkey (U…) the user signs the server's nonce
	// with; "" for none. Public: the seed stays with the user.
	Nkey string `json:"nkey,omitempty"`
	// CertSubject is the canonical subject (ParseDN) of the TLS client
	// certificates that authenticate the user; "" for none.
	CertSubject string `json:"cert_subject,omitempty"`
}

// UserKey is a stored key: its public ID and the SHA-256 of its secret.
type UserKey struct {
	ID      string    `json:"id"`
	Hash    []byte    `json:"hash"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires,omitzero"` // zero: never
}

// Info is the user as the API shows it: key IDs, never their hashes.
func (u *User) Info() semaq.UserInfo {
	in := semaq.UserInfo{Name: u.Name, Tenant: u.Tenant, Role: u.Role, Subjects: u.Subjects, Queues: u.Queues,
		RPM: u.RPM, TPM: u.TPM, Created: u.Created, Keys: make([]semaq.KeyInfo, 0, len(u.Keys))}
	for _, k := range u.Keys {
		in.Keys = append(in.Keys, semaq.KeyInfo{ID: k.ID, Created: k.Created, Expires: k.Expires})
	}
	in.Nkey = u.Nkey
	in.CertSubject = u.CertSubject
	return in
}

// Roles are the roles a user may have (docs/security.md has the table).
var Roles = []string{semaq.RoleAdmin, semaq.RolePublisher, semaq.RoleReader, semaq.RoleWorker, semaq.RoleService}

// Validate checks a user to add; the error names the field at fault.
func Validate(r semaq.UserAddRequest) error {
	if err := checkName(r.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if r.Tenant != "" {
		if err := checkName(r.Tenant); err != nil {
			return fmt.Errorf("tenant: %w", err)
		}
	}
	if err := checkLifetime(r.ExpiresIn); err != nil {
		return err
	}
	if !slices.Contains(Roles, r.Role) {
		return fmt.Errorf("role: %q is not one of %s", r.Role, strings.Join(Roles, ", "))
	}
	if r.RPM < 0 {
		return fmt.Errorf("rpm: %d is negative", r.RPM)
	}
	if r.TPM < 0 {
		return fmt.Errorf("tpm: %d is negative", r.TPM)
	}
	if err := validateCredential(r); err != nil {
		return err
	}
	if len(r.Subjects) > maxGrants {
		return fmt.Errorf("subjects: %d grants, at most %d", len(r.Subjects), maxGrants)
	}
	if len(r.Queues) > maxGrants {
		return fmt.Errorf("queues: %d grants, at most %d", len(r.Queues), maxGrants)
	}
	for _, s := range r.Subjects {
		if err := checkGrant(s); err != nil {
			return fmt.Errorf("subjects: %w", err)
		}
	}
	for _, q := range r.Queues {
		if err := checkQueueGlob(q); err != nil {
			return fmt.Errorf("queues: %w", err)
		}
	}
	switch r.Role {
	case semaq.RoleAdmin:
		if len(r.Subjects)+len(r.Queues) > 0 {
			return fmt.Errorf("subjects, queues: an admin has every right; it takes no grants")
		}
	case semaq.RolePublisher, semaq.RoleReader, semaq.RoleService:
		if len(r.Subjects) == 0 {
			return fmt.Errorf("subjects: a %s needs at least one subject", r.Role)
		}
		if len(r.Queues) > 0 {
			return fmt.Errorf("queues: only a worker serves queues")
		}
	case semaq.RoleWorker:
		if len(r.Queues) == 0 {
			return fmt.Errorf("queues: a worker needs at least one queue glob")
		}
		if len(r.Subjects) > 0 {
			return fmt.Errorf("subjects: a worker is granted queues, not subjects")
		}
	}
	return nil
}

// checkName checks a user or tenant name (semaq.CheckName): a NATS-safe
// token, since the name is part of the user's inbox subject and of the
// tenant's token subjects.
func checkName(s string) error { return semaq.CheckName(s) }

// checkGrant checks a subject grant: NATS subject syntax, and a first
// token that is literal and public. A grant of ">" or "$SQ.>" would match
// the management API and the broker's own subjects, which no grant may
// reach.
func checkGrant(s string) error {
	if err := semaq.CheckSubject(s, true); err != nil {
		return err
	}
	first, _, _ := strings.Cut(s, ".")
	if first == "*" || first == ">" {
		return fmt.Errorf("%q: the first token must be literal", s)
	}
	if strings.HasPrefix(first, "$") || strings.HasPrefix(first, "_") {
		return fmt.Errorf("%q: subjects starting with '$' or '_' are the broker's", s)
	}
	return nil
}

// checkQueueGlob checks a glob over queue names (path.Match syntax). A
// queue name is a stream name: letters, digits, '_' and '-'.
func checkQueueGlob(g string) error {
	if g == "" || len(g) > 256 {
		return fmt.Errorf("%q: a glob is 1 to 256 characters", g)
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_-*?[]^!", c) >= 0) {
			return fmt.Errorf("%q has %q: queue globs are letters, digits, '_', '-' and the glob characters * ? [ ]", g, c)
		}
	}
	if _, err := path.Match(g, ""); err != nil {
		return fmt.Errorf("%q: %w", g, err)
	}
	return nil
}

// QueueMatches reports whether a queue name matches one of globs.
func QueueMatches(globs []string, queue string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, queue); ok {
			return true
		}
	}
	return false
}

// IsGlob reports whether a queue glob has glob characters, so that it
// names more than one literal queue.
func IsGlob(g string) bool { return strings.ContainsAny(g, "*?[") }

// checkLifetime checks a key's lifetime: zero (no expiry) or positive and
// at most semaq.MaxKeyLifetime.
func checkLifetime(d time.Duration) error {
	if d < 0 || d > semaq.MaxKeyLifetime {
		return fmt.Errorf("expires_in: %s is outside 0..%s (0: the key does not expire)", d, semaq.MaxKeyLifetime)
	}
	return nil
}

// newUserKey stores k with its lifetime d from now (0: no expiry).
func newUserKey(k Key, now time.Time, d time.Duration) UserKey {
	uk := UserKey{ID: k.ID, Hash: hashSecret(k.Secret), Created: now}
	if d > 0 {
		uk.Expires = now.Add(d)
	}
	return uk
}
